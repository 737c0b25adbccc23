"""InferEngine: Llama-family generation over N tensor-parallel ranks, written only against the
device API (``anydev.plugin_api``); torch does the math on tensors viewed from our device buffers.

This module is the engine's request API (generate, add_request, abort, step, stats) and its
teardown; the start-up is in :mod:`.engine_startup`, the step loop in :mod:`.step_loop`. The model
calls the contract's kernels: the backend's own where it has them, the torch references otherwise
(``EngineConfig.kernels``); ``kernels_description`` says which. The settings and their validation are
in :mod:`.engine_config`.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
from dataclasses import dataclass

import torch

from . import interrupts

from .engine_config import EngineConfig
from .engine_startup import EngineStartup
from .errors import EngineClosedError, EngineConfigError, RequestFailedError
from .executors.base import Executor
from .output import OutputText
from .request_checks import checked_prompt, checked_sampling, kind
from .sched.sampling import SamplingParams
from .sched.scheduler import Sequence
from .stats import EngineCounters, GenerationStats, stats_since
from .step_loop import StepLoop, _Launched
from .timeline import PhaseRecord

__all__ = ["EngineConfig", "EngineCounters", "GenerationOutput", "GenerationStats", "InferEngine"]


@dataclass
class GenerationOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]       # generated tokens, the EOS token included when it ended the sequence
    text: str
    finish_reason: str         # "eos" | "length" | "stop" (a stop string or stop token) | "error"
    error: str | None = None   # why it failed (finish reason "error"; see RequestFailedError)
    logprobs: list | None = None   # with SamplingParams.logprobs: a TokenLogprobs per generated token
    prompt_logprobs: list | None = None   # with SamplingParams.prompt_logprobs: one per prompt token after the first


class InferEngine(EngineStartup, StepLoop):
    """Loads a checkpoint onto ``config.tp`` ranks and generates. Use as a context manager or call
    :meth:`close`. ``timeline`` holds each rank's init phases."""

    def __init__(self, checkpoint_or_path, config: EngineConfig | None = None, progress: bool = False):
        self.config = config = config or EngineConfig()
        self.timeline: list[PhaseRecord] = []
        self.capture_timeline: list[PhaseRecord] = []
        self.pending_graphs: list[tuple[int | None, int | None]] = []
        self.kernels_load_seconds = 0.0
        self.executor: Executor | None = None
        self.last_stats = GenerationStats()
        self._closed = False
        self._lock = threading.Lock()        # the scheduler's state (add, abort, plan, advance)
        self._step_lock = threading.Lock()   # one step at a time; close waits for the one running
        self._stats = GenerationStats()      # every step since start-up
        self._next_id = 0
        self._seq_ids = itertools.count()   # every request's own id (``index`` may repeat)
        self._inflight: _Launched | None = None   # the step launched last, its tokens not read back yet
        self._last_done = 0.0                      # when the last step's tokens were back (perf_counter)
        #: When the first token since start-up was back on the host (``time.perf_counter()``; None before).
        self.first_token_at: float | None = None
        self._owns_checkpoint = isinstance(checkpoint_or_path, (str, os.PathLike))
        if self._owns_checkpoint:
            from .loading.checkpoint import open_checkpoint

            self.checkpoint = open_checkpoint(checkpoint_or_path)
        else:
            self.checkpoint = checkpoint_or_path
        try:
            interrupts.engine_live(self)   # a Ctrl-C from here on waits for a safe point (see anydev.core.interrupts)
            self._start(progress)
        except BaseException:
            self._closed = True
            interrupts.engine_gone(self, unwinding=True)
            if self._owns_checkpoint:
                self.checkpoint.close()
            raise

    @property
    def workers(self) -> list:
        """The engine's handles on its ranks, in rank order (see :class:`~.executors.base.Executor`)."""
        return self.executor.workers if self.executor is not None else []

    @property
    def communicators(self) -> list:
        return self.executor.communicators if self.executor is not None else []

    @property
    def sampler(self):
        """The rank that samples (tp rank 0 of the last stage): its tokens are the step's."""
        return self.executor.sampler

    # ---- generation ----------------------------------------------------------------------------
    def generate(self, prompts: list[str], sampling: SamplingParams | None = None,
                 use_chat_template: bool = True) -> list[GenerationOutput]:
        """Generate for text prompts; the chat template is applied when the tokenizer has one and
        ``use_chat_template`` is true."""
        tokenizer = self.checkpoint.tokenizer
        if tokenizer is None:
            raise EngineConfigError(f"{self.checkpoint.source} has no tokenizer; call generate_ids with token ids")
        if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
            raise EngineConfigError(f"prompts must be a list of strings, got {kind(prompts)}")
        return self.generate_ids([tokenizer.encode_prompt(p, use_chat_template) for p in prompts], sampling)

    def generate_ids(self, prompt_ids: list[list[int]], sampling: SamplingParams | None = None) -> list[GenerationOutput]:
        """Generate for prompts given as token ids, on the engine's scheduler: the prompts join
        whatever else is running (other threads' calls, a server's requests), and this thread runs
        steps until its own are done (steps run one at a time, whoever calls them; each advances every
        running request). Raises :class:`EngineClosedError` when the engine is closed meanwhile, and
        :class:`RequestFailedError` when a prompt's sampling failed (the others ran to their end)."""
        self._check_open()
        sampling = checked_sampling(sampling)
        if not isinstance(prompt_ids, (list, tuple)):
            raise EngineConfigError(f"prompt_ids must be a list of token-id lists, got {kind(prompt_ids)}")
        checked = [self._checked_prompt(i, ids, sampling) for i, ids in enumerate(prompt_ids)]
        before = self._stats_snapshot()
        seqs = [self.add_request(ids, sampling, index=i) for i, ids in enumerate(checked)]
        try:
            self._drive_until(lambda: all(seq.is_finished for seq in seqs))
        except BaseException:
            for seq in seqs:
                self.abort(seq)
            raise
        self.last_stats = stats_since(before, self._stats)
        if any(seq.finish_reason == "closed" for seq in seqs):
            raise EngineClosedError("the engine was closed while this generate call was running")
        outputs = [GenerationOutput(seq.prompt, seq.output, self.output_text(seq), seq.finish_reason, seq.error,
                                    seq.logprobs if seq.sampling.logprobs is not None else None,
                                    seq.prompt_logprobs if seq.sampling.prompt_logprobs is not None else None)
                   for seq in seqs]
        failed = next((seq for seq in seqs if seq.finish_reason == "error"), None)
        if failed is not None:
            raise RequestFailedError(failed.index, failed.error, outputs)
        return outputs

    # ---- the scheduler's interface ---------------------------------------------------------------
    def add_request(self, prompt_ids: list[int], sampling: SamplingParams | None = None,
                    index: int | None = None) -> Sequence:
        """Queue one request; it joins the running batch at the next step. The returned
        :class:`Sequence` grows its ``output`` as steps run; ``is_finished`` says when it is done
        (``finish_reason`` "error" and its ``error`` when its sampling failed)."""
        self._check_open()
        sampling = checked_sampling(sampling)
        if sampling.structured is not None and self.checkpoint.tokenizer is None:
            raise EngineConfigError(f"{self.checkpoint.source} has no tokenizer, and structured output needs one "
                                    f"(its grammar is matched against the tokens' text)")
        with self._lock:
            if index is None:
                index, self._next_id = self._next_id, self._next_id + 1
            ids = self._checked_prompt(index, prompt_ids, sampling)
            seq = Sequence(index, ids, min(sampling.max_new_tokens, self.max_model_len - len(ids)), sampling=sampling,
                           eos_ids=frozenset() if sampling.ignore_eos else frozenset(self._eos_ids()),
                           seq_id=next(self._seq_ids))
            if sampling.stop:
                seq.text = OutputText(self.checkpoint.tokenizer, sampling.stop)
            self.scheduler.add(seq)
        return seq

    def abort(self, seq: Sequence, reason: str = "abort") -> None:
        """Stop ``seq`` now, its ``finish_reason`` set to ``reason``; its KV blocks go back at once
        (a step already running for it is ignored)."""
        if not isinstance(seq, Sequence):
            raise EngineConfigError(f"abort takes the Sequence that add_request returned, got {kind(seq)}")
        with self._lock:
            self.scheduler.finish(seq, reason)

    @property
    def weight_descriptions(self) -> list[str]:
        """One line per rank: its weights' formats and bytes on the device (see ``RankWeights.describe``)."""
        return [f"rank {i} weights: {worker.weights.stats.formats}" for i, worker in enumerate(self.workers)
                if worker.weights is not None]

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_work

    def stats(self) -> EngineCounters:
        """The scheduler's counters now: requests running and waiting, KV blocks, prefix cache, preemptions;
        and the steps since start-up."""
        with self._lock:
            scheduler, blocks, steps = self.scheduler, self.block_manager, self._stats
            return EngineCounters(running=len(scheduler.running), waiting=len(scheduler.waiting),
                                  kv_blocks_used=blocks.num_used, kv_blocks_total=blocks.num_blocks,
                                  prefix_cache_blocks=blocks.num_cached_blocks, prefix_cache_hit_rate=blocks.hit_rate,
                                  prefix_cache_queried_tokens=blocks.queried_tokens,
                                  prefix_cache_hit_tokens=blocks.hit_tokens, preemptions=scheduler.num_preemptions,
                                  prefill_steps=steps.prefill_steps, prefill_tokens=steps.prefill_tokens,
                                  prefill_seconds=steps.prefill_seconds, decode_steps=steps.decode_steps,
                                  decode_tokens=steps.decode_tokens, decode_seconds=steps.decode_seconds)

    def output_text(self, seq: Sequence) -> str:
        """The text of what ``seq`` generated so far, cut before the first stop string in it."""
        if seq.text is not None:
            if seq.is_finished:
                seq.text.finish()
            return seq.text.text
        return self.decode(seq.output)

    def decode(self, ids) -> str:
        """Token ids to text (special tokens skipped); "" when the model has no tokenizer."""
        tokenizer = self.checkpoint.tokenizer
        return tokenizer.decode(ids, skip_special_tokens=True) if tokenizer else ""

    def _stats_snapshot(self) -> GenerationStats:
        return GenerationStats(**vars(self._stats))

    def _checked_prompt(self, index: int, ids, sampling: SamplingParams) -> list[int]:
        """``ids`` as a list, or :class:`EngineConfigError` saying why the prompt cannot run."""
        return checked_prompt(index, ids, sampling, vocab=self.checkpoint.config.vocab_size,
                              max_model_len=self.max_model_len, block_size=self.config.block_size,
                              num_blocks=self.num_blocks, max_batched_tokens=self.scheduler.max_num_batched_tokens)

    def _eos_ids(self) -> set[int]:
        eos = set(self.checkpoint.config.eos_token_ids or [])
        tokenizer = self.checkpoint.tokenizer
        if tokenizer is not None:
            eos |= set(tokenizer.eos_token_ids or [])
        return eos

    # ---- inspection and teardown ---------------------------------------------------------------
    def kv_cache_to_host(self, rank: int) -> torch.Tensor:
        """A host copy of rank ``rank``'s whole KV pool, [layers, 2, slots, KV heads, head_dim]."""
        self._check_open()
        worker = self.workers[rank]
        return worker.submit(worker.kv_to_host).result()

    @property
    def kv_zero_device_ms(self) -> list[float]:
        """Per rank: device time of the KV zeroing, measured with timing events."""
        return [w.kv_zero_device_ms for w in self.workers]

    @property
    def kv_cache_bytes(self) -> list[int]:
        return [w.kv.layout.nbytes for w in self.workers]

    def close(self) -> None:
        """Stop: every waiting or running request ends (its caller gets :class:`EngineClosedError`),
        the step in flight (if any) is let finish, then every device buffer, stream and communicator
        is freed and every rank thread joined. (A start that failed released everything itself and left
        the engine closed, so this runs on a started engine only.)"""
        if self._closed:
            return
        self._closed = True
        try:
            with self._lock:
                for seq in [*self.scheduler.running, *self.scheduler.waiting]:
                    self.scheduler.finish(seq, "closed")
            with self._step_lock:    # the step call in progress, if any, has returned
                self._inflight = None    # a launched step's tokens are dropped; release waits for its work
            self._release_all()
        finally:
            if self._owns_checkpoint:
                self.checkpoint.close()
            interrupts.engine_gone(self, unwinding=sys.exc_info()[0] is not None)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("this InferEngine is closed; create a new one")

    def __enter__(self) -> "InferEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
