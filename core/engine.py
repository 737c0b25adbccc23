"""InferEngine: Llama-family generation over N tensor-parallel ranks, written only against the
device API (``anydev.plugin_api``); torch does the math on tensors viewed from our device buffers.

Start-up follows InfiniLM's fixed design: the engine makes every communicator at once, creates every
rank worker, and only then waits for all of them. Each rank zeroes its KV cache with one async
memset and synchronises once. The ranks are built from ``EngineConfig.worker_cls`` (a
:class:`~.rank.rank_worker.RankWorker` subclass) and run by the executor ``EngineConfig.executor`` names.

Decode steps run as device graphs (:mod:`.graphs`), captured per batch bucket at start-up, when the
backend offers them (contract 1.1's optional ``torch_graph``) and ``EngineConfig.use_graphs`` is true;
other steps (prompts, prompt chunks beside decodes) replay piecewise graphs per token bucket
(:mod:`.piecewise`). The host builds and launches step N+1 while the device runs step N
(``EngineConfig.async_steps``, :mod:`.step_io`). The model calls the contract's kernels: the
backend's own where it has them, the torch references otherwise (``EngineConfig.kernels``);
``kernels_description`` says which. The settings and their validation are in :mod:`.engine_config`.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable
import torch

from anydev import interrupts
from anydev.plugin_api import load_backend

from .engine_config import EngineConfig, default_read_threads, resolve_dtype, validate_config
from .errors import EngineClosedError, EngineConfigError, EngineInitError, RequestFailedError, SchedulerError
from .executors.base import Executor, RankPlan
from .executors.registry import make_executor
from .output import OutputText
from .rank.graphs import batch_bucket, batch_buckets
from .rank.kernel_choice import select_kernels
from .rank.piecewise import token_bucket, token_buckets
from .rank.rank_worker import KVRequest
from .rank.worker_class import worker_class
from .sched.block_manager import BlockManager
from .sched.logprobs import StepLayout, step_layout, unpack_logprobs
from .sched.logits_processors import uses_history
from .sched.sampling import NO_SEED, ROW_FAILURES, SamplingParams
from .sched.scheduler import ScheduledStep, Scheduler, Sequence, Status, build_step
from .timeline import PHASES, PhaseRecord, Timeline


@dataclass
class GenerationOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]       # generated tokens, the EOS token included when it ended the sequence
    text: str
    finish_reason: str         # "eos" | "length" | "stop" (a stop string or stop token) | "error"
    error: str | None = None   # why it failed (finish reason "error"; see RequestFailedError)
    logprobs: list | None = None   # with SamplingParams.logprobs: a TokenLogprobs per generated token
    prompt_logprobs: list | None = None   # with SamplingParams.prompt_logprobs: one per prompt token after the first


@dataclass
class GenerationStats:
    """Token counts and wall time of the last generate call (prefill steps vs decode steps).

    A step's seconds run from building its batch on the host (or from the previous step's tokens
    being back, if later: overlapped steps count once) to having its token ids back;
    ``decode_build_seconds`` is the host-only share spent building the decode batches."""

    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    decode_steps: int = 0
    decode_build_seconds: float = 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def decode_step_ms(self) -> float:
        return 1000 * self.decode_seconds / self.decode_steps if self.decode_steps else 0.0

    @property
    def decode_build_ms(self) -> float:
        return 1000 * self.decode_build_seconds / self.decode_steps if self.decode_steps else 0.0


class InferEngine:
    """Loads a checkpoint onto ``config.tp`` ranks and generates. Use as a context manager or call
    :meth:`close`. ``timeline`` holds each rank's init phases."""

    def __init__(self, checkpoint_or_path, config: EngineConfig | None = None, progress: bool = False):
        self.config = config = config or EngineConfig()
        self.timeline: list[PhaseRecord] = []
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
        self._owns_checkpoint = isinstance(checkpoint_or_path, (str, os.PathLike))
        if self._owns_checkpoint:
            from .loading.checkpoint import open_checkpoint

            self.checkpoint = open_checkpoint(checkpoint_or_path)
        else:
            self.checkpoint = checkpoint_or_path
        try:
            interrupts.engine_live(self)   # a Ctrl-C from here on waits for a safe point (see anydev.interrupts)
            self._start(progress)
        except BaseException:
            self._closed = True
            interrupts.engine_gone(self, unwinding=True)
            if self._owns_checkpoint:
                self.checkpoint.close()
            raise

    # ---- start-up ----------------------------------------------------------------------------
    def _start(self, progress: bool) -> None:
        config, model = self.config, self.checkpoint.config
        validate_config(config, model)
        self.max_model_len = config.max_model_len or model.max_position_embeddings
        self.backend = load_backend(config.device)
        executor = make_executor(config, self.backend)   # checks the devices and the launch; starts nothing
        self.dtype = resolve_dtype(config, self.backend)
        self.kernels = select_kernels(self.backend, config.kernels)
        self.kernels_description = self.kernels.describe()
        #: Steps read their tokens back before the next is planned at pp > 1 (the first stage embeds
        #: tokens the host gives it).
        self.async_steps = config.async_steps and config.pp == 1
        self.uses_graphs = (config.use_graphs and config.pp == 1
                            and worker_class(config.worker_cls).supports_graphs(self.backend))

        #: Block-table width: the blocks of one sequence of the longest context (graphs are captured
        #: at this width, so context length is no bucket).
        self.max_blocks_per_seq = blocks_per_seq = -(-self.max_model_len // config.block_size)
        kv = KVRequest(config.block_size, config.num_blocks, config.max_num_seqs * blocks_per_seq, blocks_per_seq,
                       config.memory_fraction)
        cancel, timeline = threading.Event(), Timeline()
        budget = config.max_num_batched_tokens or 2048
        if not config.enable_chunked_prefill:
            budget = max(budget, self.max_model_len)
        plan = RankPlan(config, "", self.dtype, kv, progress, self.max_model_len, self.uses_graphs,
                        config.weight_read_threads or default_read_threads(config.tp * config.pp),
                        max_step_tokens=max(budget, config.max_num_seqs), max_blocks=blocks_per_seq)
        self.executor = executor
        start = time.perf_counter()
        try:
            executor.start(plan, self.checkpoint, self.kernels, timeline, cancel)
            self.init_seconds = time.perf_counter() - start
            self.graph_buckets = batch_buckets(config.max_num_seqs) if self.uses_graphs else []
            pieces = min(config.piecewise_max_tokens, budget) if self.uses_graphs else 0
            self.token_buckets = token_buckets(pieces) if pieces else []
            if self.uses_graphs:   # every rank at once: the collectives inside the captures line up
                executor.wait_init(executor.run("capture_graphs", self.graph_buckets, self.token_buckets), cancel)
            self.capture_seconds = time.perf_counter() - start - self.init_seconds
        except BaseException as exc:
            self._release_all(exc)
            if isinstance(exc, EngineInitError) and isinstance(exc.cause, EngineConfigError):
                raise exc.cause from None   # e.g. the KV cache does not fit: a config problem, said as such
            raise
        self.timeline = sorted(timeline.records, key=lambda r: (r.rank, PHASES.index(r.phase)))
        self.num_blocks = min(w.kv.layout.num_blocks for w in self.workers)
        self.block_manager = BlockManager(self.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, budget, config.enable_chunked_prefill)

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

    def _release_all(self, error: BaseException | None = None) -> None:
        """Free every rank's memory on its own thread, end the ranks, close the communicators.

        Errors met while releasing are attached to ``error`` as notes, or raised when there is none.
        """
        executor, self.executor = self.executor, None
        if executor is None:
            return
        problems = executor.close()
        error = error or executor.failure   # a failed rank's consequences: already raised, not again
        if problems and error is not None:
            for p in problems:
                error.add_note(f"while releasing: {type(p).__name__}: {p}")
        elif problems:
            raise problems[0]

    # ---- generation ----------------------------------------------------------------------------
    def generate(self, prompts: list[str], sampling: SamplingParams | None = None,
                 use_chat_template: bool = True) -> list[GenerationOutput]:
        """Generate for text prompts; the chat template is applied when the tokenizer has one and
        ``use_chat_template`` is true."""
        tokenizer = self.checkpoint.tokenizer
        if tokenizer is None:
            raise EngineConfigError(f"{self.checkpoint.source} has no tokenizer; call generate_ids with token ids")
        if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
            raise EngineConfigError(f"prompts must be a list of strings, got {_kind(prompts)}")
        return self.generate_ids([tokenizer.encode_prompt(p, use_chat_template) for p in prompts], sampling)

    def generate_ids(self, prompt_ids: list[list[int]], sampling: SamplingParams | None = None) -> list[GenerationOutput]:
        """Generate for prompts given as token ids, on the engine's scheduler: the prompts join
        whatever else is running (other threads' calls, a server's requests), and this thread runs
        steps until its own are done (steps run one at a time, whoever calls them; each advances every
        running request). Raises :class:`EngineClosedError` when the engine is closed meanwhile, and
        :class:`RequestFailedError` when a prompt's sampling failed (the others ran to their end)."""
        self._check_open()
        sampling = _checked_sampling(sampling)
        if not isinstance(prompt_ids, (list, tuple)):
            raise EngineConfigError(f"prompt_ids must be a list of token-id lists, got {_kind(prompt_ids)}")
        checked = [self._checked_prompt(i, ids, sampling) for i, ids in enumerate(prompt_ids)]
        before = self._stats_snapshot()
        seqs = [self.add_request(ids, sampling, index=i) for i, ids in enumerate(checked)]
        try:
            self._drive_until(lambda: all(seq.is_finished for seq in seqs))
        except BaseException:
            for seq in seqs:
                self.abort(seq)
            raise
        self.last_stats = _stats_since(before, self._stats)
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
        sampling = _checked_sampling(sampling)
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
            raise EngineConfigError(f"abort takes the Sequence that add_request returned, got {_kind(seq)}")
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

    def step(self) -> list[Sequence]:
        """Plan and launch one step, then read back the tokens of the step launched before it
        (``async_steps``; otherwise of this one). Returns the sequences that got a token (finished
        ones included). Raises :class:`EngineClosedError` once the engine is closed."""
        with self._step_lock:
            self._check_open()
            self.executor.check()
            with self._lock:
                plan = self.scheduler.schedule()
                ended = self._take_ended() if plan.seqs else ()
            previous, self._inflight = self._inflight, None
            if not plan.seqs:
                if previous is None:
                    if self.scheduler.has_work:
                        raise SchedulerError("requests wait but none could be scheduled (a scheduler bug)")
                    return []
                return self._take_tokens(previous, self._read_tokens(previous.ticket))
            start, decode = time.perf_counter(), plan.is_decode   # (before the previous tokens change the sequences)
            batch = self.build_step(plan.seqs, plan.num_new)
            layout = step_layout(_row_params(plan), [0, *itertools.accumulate(plan.num_new)])
            built = time.perf_counter()
            ticket, tokens = self._run_step(batch, plan, previous.ticket if previous else None, ended)
            got = self._take_tokens(previous, tokens) if previous else []
            with self._lock:
                launched = _Launched(ticket, [(seq, seq.pending_row) for seq in self.scheduler.advance(plan)],
                                     plan.num_tokens, decode, start, built, _packed_spans(layout))
            if self.async_steps:
                self._inflight = launched
            else:
                got += self._take_tokens(launched, self._read_tokens(ticket))
            return got

    def _read_tokens(self, ticket) -> list[int]:
        """The sampled tokens of a launched step, read on the sampling rank's thread."""
        return self.executor.sampled_tokens(ticket)

    def _take_tokens(self, launched: "_Launched", tokens: list[int]) -> list[Sequence]:
        """Give each sequence of a launched step its sampled token (those finished meanwhile drop it)."""
        self._account(launched)
        got = []
        packed = getattr(tokens, "logprobs", None)
        packed = unpack_logprobs(packed) if packed is not None else None
        with self._lock:
            for seq, row in launched.rows:
                seq.num_pending = 0
                if seq.status is not Status.FINISHED:
                    if packed is not None and row in launched.logprob_spans and tokens[row] >= 0:
                        _take_logprobs(seq, packed, *launched.logprob_spans[row])
                    self._append_token(seq, tokens[row])
                    got.append(seq)
        return got

    def _append_token(self, seq: Sequence, token: int) -> None:
        if token < 0:          # its sampling failed: this request ends, the engine goes on
            seq.error = ROW_FAILURES[token]
            self.scheduler.finish(seq, "error")
            return
        seq.output.append(token)
        params = seq.sampling
        hit_stop_string = seq.text is not None and seq.text.add(token)
        reason = None
        if token in seq.eos_ids:
            reason = "eos"
        elif token in params.stop_token_ids:
            reason = "stop"
        elif hit_stop_string:
            reason = "stop"
        elif len(seq.output) >= seq.max_new_tokens:
            reason = "length"
        if reason:
            self.scheduler.finish(seq, reason)

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

    def _drive_until(self, done: Callable[[], bool]) -> None:
        """Run steps on this thread until ``done()`` (other threads' requests advance too)."""
        while not done():
            if self._closed:
                raise EngineClosedError("the engine was closed while this generate call was running")
            self.step()

    def _account(self, launched: "_Launched") -> None:
        """Count a step whose tokens are back. Its seconds run from when it started being built (or
        when the step before it was back, if later: overlapped steps are not counted twice) to now."""
        now = time.perf_counter()
        seconds = now - max(launched.start, self._last_done)
        self._last_done = now
        s = self._stats
        if launched.decode:
            s.decode_tokens += launched.num_tokens
            s.decode_seconds += seconds
            s.decode_steps += 1
            s.decode_build_seconds += launched.built - launched.start
        else:
            s.prefill_tokens += launched.num_tokens
            s.prefill_seconds += seconds

    def _stats_snapshot(self) -> GenerationStats:
        return GenerationStats(**vars(self._stats))

    def build_step(self, seqs: list[Sequence], num_new: list[int] | None = None):
        """The step batch in which sequence i feeds ``num_new[i]`` tokens from its ``num_cached`` on
        (default: all its uncached tokens); a pure decode step is padded to its graph bucket when
        decode graphs are on. Pass it to :meth:`_run_step`."""
        block_size = self.config.block_size
        num_prev = self.config.max_num_seqs
        if not self.uses_graphs:
            return build_step(seqs, num_new, block_size=block_size, num_prev=num_prev)
        decode = all(n == 1 for n in num_new) if num_new is not None else \
            all(s.num_tokens - s.num_cached == 1 for s in seqs)
        if decode:
            rows = batch_bucket(len(seqs), self.config.max_num_seqs)
            return build_step(seqs, num_new, self.max_blocks_per_seq, block_size=block_size, pad_to=rows,
                              num_prev=num_prev)
        tokens = sum(num_new) if num_new is not None else sum(s.num_tokens - s.num_cached for s in seqs)
        return build_step(seqs, num_new, self.max_blocks_per_seq, block_size=block_size, num_prev=num_prev,
                          pad_tokens_to=token_bucket(tokens, self.token_buckets))

    def _checked_prompt(self, index: int, ids, sampling: SamplingParams) -> list[int]:
        """``ids`` as a list, or :class:`EngineConfigError` saying why the prompt cannot run."""
        vocab = self.checkpoint.config.vocab_size
        if not isinstance(ids, (list, tuple)):
            raise EngineConfigError(f"prompt {index} must be a list of token ids, got {_kind(ids)}")
        ids = list(ids)
        if not ids:
            raise EngineConfigError(f"prompt {index} is empty")
        if not all(isinstance(t, int) and 0 <= t < vocab for t in ids):
            raise EngineConfigError(f"prompt {index} has token ids outside the vocabulary (0..{vocab - 1})")
        if len(ids) >= self.max_model_len:
            raise EngineConfigError(
                f"prompt {index} has {len(ids)} tokens, but the context (max_model_len) is {self.max_model_len} "
                f"tokens, leaving no room to generate; shorten the prompt or raise max_model_len"
            )
        budget = self.scheduler.max_num_batched_tokens
        if (sampling.prompt_logprobs is not None or sampling.repetition_penalty != 1.0) and len(ids) + 1 > budget:
            raise EngineConfigError(
                f"prompt {index} has {len(ids)} tokens; scoring a prompt (prompt_logprobs) or a repetition penalty "
                f"computes it in one step, of at most {budget} tokens (max_num_batched_tokens); shorten it or "
                f"raise the budget")
        if sampling.logit_bias and max(sampling.logit_bias) >= vocab:
            raise EngineConfigError(f"logit_bias names token {max(sampling.logit_bias)}, outside the vocabulary "
                                    f"(0..{vocab - 1})")
        max_new = min(sampling.max_new_tokens, self.max_model_len - len(ids))
        needed = -(-(len(ids) + max_new) // self.config.block_size)
        if needed > self.num_blocks:
            raise EngineConfigError(
                f"prompt {index} needs {needed} KV blocks ({len(ids)} + {max_new} tokens), but the "
                f"cache has {self.num_blocks}; raise num_blocks or lower max_new_tokens"
            )
        return ids

    def _eos_ids(self) -> set[int]:
        eos = set(self.checkpoint.config.eos_token_ids or [])
        tokenizer = self.checkpoint.tokenizer
        if tokenizer is not None:
            eos |= set(tokenizer.eos_token_ids or [])
        return eos

    def _take_ended(self) -> tuple[int, ...]:
        """Under the lock: the ids of the seeded sequences that ended since the last step was
        launched (the next step tells the sampler to drop their generators)."""
        ended, self.scheduler.ended = self.scheduler.ended, []
        return tuple(seq.seq_id for seq in ended if seq.sampling.seed is not None or uses_history(seq.sampling))

    def _run_step(self, batch, plan: ScheduledStep, read=None, ended: tuple[int, ...] = ()):
        """Launch one step on every rank; returns rank 0's ticket for its tokens and, when ``read``
        (an earlier step's ticket) is given, that step's tokens. Rows whose context the step does not
        complete (prefill chunks) need no token. A seeded row is sampled with its sequence's generator,
        kept on the sampler (``seeds``: its id and seed); ``ended``: the sequences whose generators go."""
        params = _row_params(plan)
        seeds = [_row_key(seq, p) for seq, p in zip(plan.seqs, params)]
        if self.config.pp > 1:
            return self._run_pipeline_step(plan, params, seeds, ended), None
        share = self.async_steps and len(self.workers) > 1
        futures = self.executor.run("forward", batch, params, seeds, share, None, ended,
                                    sampler_args=(batch, params, seeds, share, read, ended))
        self.executor.wait_step(futures)
        return futures[0].result()

    def _run_pipeline_step(self, plan: ScheduledStep, params, seeds, ended):
        """Launch one step on every stage (pp > 1), split into micro-batches; the sampler's ticket."""
        bounds = micro_batch_bounds(len(plan.seqs), plan.is_decode, self.config.pp)
        batches = [self.build_step(plan.seqs[a:b], plan.num_new[a:b]) for a, b in bounds]
        futures = self.executor.run("forward_stage", batches, [params[a:b] for a, b in bounds],
                                    [seeds[a:b] for a, b in bounds], ended)
        self.executor.wait_step(futures)
        return futures[self.executor.layout.sampler].result()

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


@dataclass
class _Launched:
    """A launched step: where rank 0's sampled tokens arrive, the row of each sequence that gets one,
    and what the step's accounting needs (tokens fed, whether a decode step, start and built times)."""

    ticket: object
    rows: list[tuple[Sequence, int]]
    num_tokens: int
    decode: bool
    start: float
    built: float
    #: row -> (its prompt positions' packed rows as (first, end) or None, its sampled token's packed row or None)
    logprob_spans: dict[int, tuple]


def _packed_spans(layout: StepLayout) -> dict[int, tuple]:
    """Where each row's packed logprobs rows are (see ``sched.logprobs``: a row's prompt positions, then its token)."""
    spans, cursor = {}, 0
    prompt = {row: count for row, _, count in layout.prompt}
    output = set(layout.output)
    for row in sorted(prompt.keys() | output):
        first = cursor
        cursor += prompt.get(row, 0)
        mine = cursor if row in output else None
        cursor += row in output
        spans[row] = ((first, first + prompt[row]) if row in prompt else None, mine)
    return spans


def _take_logprobs(seq: Sequence, packed: list, prompt: tuple[int, int] | None, mine: int | None) -> None:
    """Give ``seq`` its share of a step's logprobs, each top list cut to what it asked for."""
    def cut(entry, k):
        return dataclasses.replace(entry, top=entry.top[:k])

    params = seq.sampling
    if prompt is not None and seq.scores_prompt and prompt[1] - prompt[0] >= len(seq.prompt) - 1:
        seq.prompt_logprobs = [cut(e, params.prompt_logprobs) for e in packed[prompt[0]:prompt[0] + len(seq.prompt) - 1]]
    if mine is not None:
        seq.logprobs.append(cut(packed[mine], params.logprobs))


def _row_key(seq: Sequence, params: SamplingParams | None) -> tuple[int, int] | None:
    """A sampled row's ``(sequence id, seed)`` for the sampler, where it keeps state for the sequence
    (a seeded generator, a penalties' token record: seed ``NO_SEED`` then); None otherwise."""
    if params is None or (params.seed is None and not uses_history(params)):
        return None
    return seq.seq_id, (params.seed if params.seed is not None else NO_SEED)


def _row_params(plan: ScheduledStep) -> list[SamplingParams | None]:
    """Each row's sampling parameters, None for a row that needs no token (a prompt chunk short of its end)."""
    return [seq.sampling if seq.num_cached + n == seq.num_tokens else None for seq, n in zip(plan.seqs, plan.num_new)]


def micro_batch_bounds(rows: int, decode: bool, pp: int) -> list[tuple[int, int]]:
    """The row ranges of a step's micro-batches: a decode step of 2 rows or more splits in
    min(pp, rows) near-equal parts (so the stages overlap); other steps are one micro-batch."""
    parts = min(pp, rows) if decode and rows >= 2 else 1
    cuts = [rows * i // parts for i in range(parts + 1)]
    return list(zip(cuts, cuts[1:]))


def _checked_sampling(sampling) -> SamplingParams:
    """``sampling`` (default: greedy) once :meth:`SamplingParams.validate` passed it."""
    sampling = SamplingParams() if sampling is None else sampling
    if not isinstance(sampling, SamplingParams):
        raise EngineConfigError(f"sampling must be a SamplingParams, got {_kind(sampling)}")
    sampling.validate()
    return sampling


def _kind(value) -> str:
    """How a wrong argument is named in an error: None, or its type."""
    return "None" if value is None else type(value).__name__


def _stats_since(before: GenerationStats, now: GenerationStats) -> GenerationStats:
    return GenerationStats(**{name: getattr(now, name) - value for name, value in vars(before).items()})
