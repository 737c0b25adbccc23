"""One tensor-parallel rank on its own thread, as in InfiniLM's RankWorker.

Every command for a rank runs on that rank's thread (a one-thread executor), so its device stays
current and its stream is driven by one thread; torch and cffi release the GIL, so ranks overlap.

``EngineConfig.worker_cls`` names the class every rank is built from (:mod:`.worker_class`): this
:class:`RankWorker` by default, or a subclass that changes one of its documented steps
(:meth:`RankWorker.check_config`, :meth:`~RankWorker.supports_graphs`, :meth:`~RankWorker.new_graph`,
:meth:`~RankWorker.zero_kv_cache`, :meth:`~RankWorker.enter_phase`), as the tests' fault injection and
graph double and the init benchmark's host-staged zeroing do (``docs/executors.md``).
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch
from tqdm.auto import tqdm

from anydev.plugin_api import Communicator, Device

from ..errors import EngineConfigError, EngineInitError
from ..loading.checkpoint_errors import ModelLoadError
from .graphs import DecodeGraphs
from .kernel_warmup import KernelWarmup, warmup_steps
from .piecewise import PiecewiseGraphs
from .kv_cache import KVLayout, PagedKVCache, check_fits
from ..models.batch import StepBatch, packed_nbytes
from anydev.plugin_api.kernels import cos_sin_cache
from ..models.fusion import fused_views
from ..models.llama import LlamaRank
from ..models.registry import family_of
from ..models.pipeline import RankLayout, Stage
from ..models.rope import inverse_frequencies
from ..models.sharding import RankShard
from ..sched.logits_processors import TokenHistory, uses_history
from ..sched.logprobs import StepLayout, pack_step, step_layout
from ..sched.sampling import SamplingParams, SeededGenerators, sample_rows
from .step_io import StepIO, TokenTicket
from .structured_rows import StructuredRows
from ..timeline import Timeline
from ..config import expected_tensor_names
from ..loading.weights import DEFAULT_STAGING_BYTES, RankWeights, projection_formats, split_layouts


class InitCancelled(Exception):
    """Raised inside a rank's init when another rank failed and the engine asked everyone to stop."""


@dataclass(frozen=True)
class KVRequest:
    """How the engine wants each rank's KV cache sized."""

    block_size: int
    num_blocks: int | None      # None: as many as fit, up to ``max_blocks``
    max_blocks: int             # what max_num_seqs sequences of max_model_len need
    min_blocks: int             # what one sequence of max_model_len needs
    memory_fraction: float


@dataclass(frozen=True)
class RankSetup:
    """Everything a rank needs to initialise itself (shared objects are read-only or locked)."""

    rank: int
    device: Device
    comm: Communicator
    checkpoint: object
    shard: RankShard
    dtype: torch.dtype
    kv: KVRequest
    progress: bool
    kernels: object                         # the KernelSet the model calls (see ..kernel_choice)
    max_model_len: int                      # positions the rotary table covers
    staging_bytes: int = DEFAULT_STAGING_BYTES   # pinned host memory for loading the weights
    read_threads: int = 1                   # threads reading each block of weights
    max_step_rows: int = 1                  # the most sequences a step has (max_num_seqs)
    max_step_tokens: int = 1                # the most tokens a step feeds (graph padding included)
    max_blocks: int = 1                     # block-table width: blocks of one sequence of the longest context
    stage: Stage | None = None              # the pipeline stage of this rank (None: every layer, pp=1)
    pipe_comm: Communicator | None = None   # every rank of every stage, for send/recv between stages (pp > 1)
    quantization: str | None = None         # projection weights: see .weights.QUANTIZATIONS (None: as stored)
    layout: RankLayout = RankLayout()       # where every rank sits (tp x pp)
    seed: int | None = None                 # the sampler's random state for unseeded requests (None: as it is)
    #: (decode buckets, token buckets) whose padding steps compile their kernels while the weights
    #: load (:mod:`.kernel_warmup`); empty: none.
    warm_steps: tuple = ()


class RankWorker:
    """One rank: its init (:meth:`init`), its steps (:meth:`forward`, :meth:`forward_stage`) and its
    teardown (:meth:`release`), every command on the rank's own thread (:meth:`submit`)."""

    # ---- the extension points (``EngineConfig.worker_cls``) -------------------------------------
    @classmethod
    def check_config(cls, config) -> None:
        """Raise :class:`EngineConfigError` for a setting this worker class cannot run (checked with
        the rest of the config, before any weights load)."""

    @classmethod
    def supports_graphs(cls, backend) -> bool:
        """Whether decode steps can run as graphs on ``backend``: its device graphs (contract 1.1's
        optional ``torch_graph``)."""
        return backend.supports("torch_graph")

    def new_graph(self, replay_eagerly: Callable[[], None]):
        """A new graph on this rank's stream: the device API's. ``replay_eagerly`` runs the captured
        step again eagerly (for a graph that cannot replay itself)."""
        return self.stream.create_graph()

    def zero_kv_cache(self) -> None:
        """Zero the KV cache, queued on the rank's stream: one device memset (init's one
        synchronize waits for it)."""
        self.kv.zero_async(self.stream)

    def enter_phase(self, phase: str):
        """The context of init phase ``phase`` (one of ``anydev.core.timeline.PHASES``): times it."""
        return self.timeline.phase(self.rank, phase)

    # ---- the rank ------------------------------------------------------------------------------
    def __init__(self, setup: RankSetup, timeline: Timeline, cancel: threading.Event):
        self.setup = setup
        self.rank = setup.rank
        self.device = setup.device
        self.timeline = timeline
        self.cancel = cancel
        self.stream = None
        self.weights: RankWeights | None = None
        self.kv: PagedKVCache | None = None
        self.model: LlamaRank | None = None
        self.graphs: DecodeGraphs | None = None
        self.pieces: PiecewiseGraphs | None = None
        self.io: StepIO | None = None
        #: On the sampler: the grammar matchers of the sequences with structured output, and their masks.
        self.structured: StructuredRows | None = None
        self.kv_zero_device_ms: float | None = None
        self._zero_events = None
        self._warmup: KernelWarmup | None = None
        self._rotary: torch.Tensor | None = None
        self.stage = setup.stage or Stage(0, 1, 0, setup.checkpoint.config.num_hidden_layers)
        #: This rank samples the step's tokens: tp rank 0 of the last stage.
        self.samples = setup.layout.sampler == self.rank
        #: On the sampler: the generator of every seeded sequence that sampled and has not ended.
        self.generators = SeededGenerators(setup.device.torch_device)
        if self.samples and setup.seed is not None:
            torch.manual_seed(setup.seed)   # the default generators, which unseeded rows draw from
        #: On the sampler: the token record of every penalized sequence that sampled and has not ended.
        self.history = TokenHistory(setup.checkpoint.config.vocab_size, setup.device.torch_device)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"anydev-rank{self.rank}")

    def submit(self, fn, *args) -> Future:
        """Run ``fn(*args)`` on this rank's thread."""
        return self._executor.submit(fn, *args)

    # ---- init ------------------------------------------------------------------------------
    def init(self) -> None:
        """All init phases in order. Raises :class:`EngineInitError` naming the phase, or
        :class:`InitCancelled` when another rank failed first."""
        phase = "device setup"
        try:
            with self._phase(phase):
                self.device.set_current()
                self.stream = self.device.create_stream()
            phase = "weights"
            with self._phase(phase):
                self._load_weights()
            phase = "kernel compile"
            if self._warmup is not None:
                self._check_cancel()
                with self._capture_phase(phase):   # the compilations left when the weights are in
                    self._warmup.wait()
                self._warmup = None
            phase = "kv alloc"
            with self._phase(phase):
                self.kv = PagedKVCache(self.device, self._kv_layout())
            phase = "kv zero"
            with self._phase(phase):
                self._zero_kv()
            phase = "sync"
            with self._phase(phase):
                self.stream.synchronize()   # the one wait: weights copies and the KV memset
            phase = "weights"
            self._check_weights_finite()
            self._measure_kv_zero()
            phase = "ready"
            with self._phase(phase):
                self._build_model()
        except BaseException as exc:
            if self._warmup is not None:
                self._warmup.close()
                self._warmup = None
            if isinstance(exc, InitCancelled) or not isinstance(exc, Exception):
                raise
            raise EngineInitError(self.rank, phase, exc) from exc

    def _phase(self, phase: str):
        if self.cancel.is_set():
            raise InitCancelled(f"rank {self.rank} stopped before '{phase}'")
        return self.enter_phase(phase)

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise InitCancelled(f"rank {self.rank} stopped while loading weights")

    def _load_weights(self) -> None:
        s = self.setup
        formats = projection_formats(s.checkpoint, expected_tensor_names(s.checkpoint.config), s.shard, s.quantization,
                                     split_layouts(s.kernels, s.dtype))
        self.weights = RankWeights(self.device, s.checkpoint.config, s.shard, s.dtype, self.stage, formats)
        self._rotary = self._rotary_table()
        if s.warm_steps:   # the buffer exists: the kernels compile over it while it fills
            self._warmup = KernelWarmup(s, self.weights, self.stage, self._rotary, warmup_steps(s, *s.warm_steps))
        with tqdm(total=self.weights.nbytes, unit="B", unit_scale=True, desc=f"rank {self.rank} weights",
                  position=self.rank, leave=True, disable=not s.progress) as bar:
            self.weights.load(s.checkpoint, self.stream, self._check_cancel, bar.update, s.staging_bytes,
                              s.read_threads)

    def _check_weights_finite(self) -> None:
        bad = self.weights.first_non_finite(self.stream)
        if bad is not None:
            raise ModelLoadError(f"{self.setup.checkpoint.source}: weight '{bad}' holds NaN or infinite values: "
                                 "the checkpoint is corrupt (or its tensors' types are misread)")

    def _kv_layout(self) -> KVLayout:
        s, config = self.setup, self.setup.checkpoint.config
        layout = KVLayout(len(self.stage.layers), 1, s.kv.block_size, s.shard.num_kv_heads,
                          config.head_dim, s.dtype)
        free = self.device.memory_info().free
        if s.kv.num_blocks is not None:
            layout = _with_blocks(layout, s.kv.num_blocks)
            check_fits(layout, free, s.kv.memory_fraction, self.rank)
            return layout
        fit = int(free * s.kv.memory_fraction) // layout.block_bytes
        if fit < s.kv.min_blocks:
            raise EngineConfigError(
                f"rank {self.rank}: only {fit} KV blocks of {s.kv.block_size} tokens fit in the memory left after "
                f"weights, but one sequence of the full context needs {s.kv.min_blocks}; lower max_model_len "
                f"or raise memory_fraction"
            )
        return _with_blocks(layout, min(fit, s.kv.max_blocks))

    def _zero_kv(self) -> None:
        self._zero_events = (self.device.create_event(timing=True), self.device.create_event(timing=True))
        self.stream.record(self._zero_events[0])
        self.zero_kv_cache()
        self.stream.record(self._zero_events[1])

    def _measure_kv_zero(self) -> None:
        start, end = self._zero_events
        self.kv_zero_device_ms = start.elapsed_ms(end)
        start.close()
        end.close()
        self._zero_events = None

    def _build_model(self) -> None:
        s, config = self.setup, self.setup.checkpoint.config
        rotary = self._rotary
        tp = s.shard.tp > 1
        kv_layers = [self.kv.layer(i) for i in range(len(self.stage.layers))]
        family = family_of(config)
        weights = {**self.weights.tensors, **fused_views(self.weights, self.stage.layers, family.fusions)}
        step_bytes = packed_nbytes(s.max_step_tokens, s.max_step_rows, s.max_blocks)
        self.io = StepIO(self.device, self.stream, s.max_step_rows, step_bytes, s.max_step_rows + s.max_step_tokens)
        if self.samples:
            self.structured = StructuredRows(s.checkpoint.tokenizer, config.vocab_size, self.device, self.stream,
                                             s.max_step_rows)
        self.model = family.rank_class(config, s.shard, weights, kv_layers, rotary, s.kernels, s.kv.block_size,
                                       self._all_reduce if tp else None, self._all_gather if tp else None,
                                       self.stage, dtype=s.dtype)

    def _rotary_table(self) -> torch.Tensor:
        s, config = self.setup, self.setup.checkpoint.config
        with self.stream.torch_stream():
            inv_freq = inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling)
            return cos_sin_cache(inv_freq.to(self.device.torch_device), s.max_model_len)

    def capture_graphs(self, buckets: list[int], token_buckets: list[int]) -> None:
        """Capture the decode graphs of the batch buckets ``buckets``, then the piecewise graphs of the
        token buckets ``token_buckets`` (all ranks call this together; every graph shares one memory
        pool). A bucket this leaves out runs eagerly (:meth:`forward`) until :meth:`capture_bucket` captures it."""
        phase = self._capture_phase
        with self.stream.torch_stream():
            self.graphs = DecodeGraphs(self.rank, self.new_graph, self.model.forward, self.io, self.setup.max_blocks,
                                       phase)
            self.graphs.capture_all(buckets)
            if token_buckets:
                self.pieces = PiecewiseGraphs(self.rank, self.new_graph, self.model, self.io, self.setup.max_blocks,
                                              share_pool_with=self.graphs.pool_owner, phase=phase)
                self.pieces.capture_all(token_buckets)
        self.stream.synchronize()

    def _capture_phase(self, phase: str):
        """Times a part of a capture (``anydev.core.timeline.CAPTURE_PHASES``)."""
        return self.timeline.phase(self.rank, phase)

    def capture_bucket(self, rows: int | None, tokens: int | None) -> None:
        """Capture the decode graph of the batch bucket ``rows`` and/or the piecewise graphs of the
        token bucket ``tokens`` that start-up left out (``EngineConfig.lazy_graphs``); every rank at
        once, between two steps (in stream order after the step launched last; the next step puts its
        inputs after the capture's)."""
        with self.stream.torch_stream():
            if rows is not None:
                self.graphs.capture(rows)
            if tokens is not None:
                if self.pieces is None:
                    self.pieces = PiecewiseGraphs(self.rank, self.new_graph, self.model, self.io,
                                                  self.setup.max_blocks, share_pool_with=self.graphs.pool_owner,
                                                  phase=self._capture_phase)
                self.pieces.capture_bucket(tokens)

    def _all_reduce(self, tensor: torch.Tensor) -> None:
        """Sum ``tensor`` over the ranks, in place, in this rank's stream order."""
        self.setup.comm.all_reduce(tensor, op="sum", stream=self.stream)

    def _all_gather(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        """``recv[r] = send`` of rank r, in this rank's stream order."""
        self.setup.comm.all_gather(send, recv, stream=self.stream)

    # ---- serving ---------------------------------------------------------------------------
    def forward(self, batch: StepBatch, sampling: list[SamplingParams | None],
                seeds: list[tuple[int, int] | None], share_tokens: bool = False,
                read: TokenTicket | None = None, ended: tuple[int, ...] = ()) -> tuple[TokenTicket | None, list[int] | None]:
        """Launch one step without waiting for it: its inputs into the rank's buffer (one copy), the
        forward (a graph replay for a decode step padded to a graph bucket, the piecewise graphs for
        another step padded to a token bucket, else eager), and on the sampler the sampling of the
        real rows on the device, each row with its own parameters and, when ``seeds[i]`` gives its
        ``(sequence id, seed)``, its sequence's own generator (see :class:`SeededGenerators`); then
        the generators of the sequences ``ended`` since the last step are dropped. The sampled tokens
        are kept where the next step takes them; with ``share_tokens`` (the next step is built before
        they are read back, at tp > 1) rank 0 shares them with every rank.
        Returns rank 0's ticket for reading them back (None on other ranks) and, when ``read`` is
        given, the tokens of that earlier step (read after this one is launched)."""
        layout = step_layout(sampling, batch.cu_seqlens_q.tolist())
        token_logits = None
        with self.stream.torch_stream():
            step = self.io.put(batch)
            if layout.scores_prompt:      # every position's logits: eagerly (every rank, for the collectives)
                token_logits = self.model.token_logits(step)
                logits = token_logits.index_select(0, step.last_index)
            elif batch.real_rows is not None and self.graphs.has(batch.B):
                logits = self.graphs.run(step)[:batch.real_rows]
            elif batch.real_tokens is not None and self.pieces is not None and self.pieces.has(batch.T):
                logits = self.pieces.run(step)
            else:   # eager; a bucket not captured yet runs its padded step so: the kernels and shapes of its graphs
                logits = self.model.forward(step)
                logits = logits[:batch.real_rows] if batch.real_rows is not None else logits
            if self.samples:
                self.structured.start_step(self.io.read)
                tokens, logprobs = self._sample(logits, sampling, seeds, layout, token_logits, batch,
                                                place_rows=self.io.logprob_rows)
            else:
                tokens, logprobs = None, None
            self._drop_ended(ended)
            if share_tokens:
                tokens = self._rank0_tokens(tokens, logits.shape[0], logits.device)
            ticket = self.io.publish(tokens, read_back=self.samples, logprobs=logprobs) if tokens is not None else None
            if self.samples:
                self.structured.published(ticket, self.io.read)
        return ticket, (self.io.read(read) if read is not None else None)

    def forward_stage(self, micro_batches: list[StepBatch], sampling: list[list[SamplingParams | None]],
                      seeds: list[list[tuple[int, int] | None]], ended: tuple[int, ...] = ()) -> TokenTicket | None:
        """One step of this rank's pipeline stage (pp > 1), eagerly, micro-batch after micro-batch:
        receive the hidden states and residual from the previous stage (or embed, on the first),
        run the stage's layers, send them on to the next stage (or, on the last, norm, lm_head and,
        on its tp rank 0, sample and drop the ``ended`` generators, as :meth:`forward` does). Every
        transfer is on the rank's stream, so while this stage runs micro-batch i+1 the next one runs
        micro-batch i. Returns the sampler's ticket (None elsewhere)."""
        stage, comm, layout = self.stage, self.setup.pipe_comm, self.setup.layout
        hidden = self.setup.checkpoint.config.hidden_size
        tokens, logprobs, offset = [], [], 0
        with self.stream.torch_stream():
            if self.samples:
                self.structured.start_step(self.io.read)
            for batch, params, keys in zip(micro_batches, sampling, seeds):
                scored = step_layout(params, batch.cu_seqlens_q.tolist())
                step = self.io.put(batch)
                if stage.is_first:
                    x, residual = self.model.embed_tokens(step), None
                else:
                    received = torch.empty((2, batch.num_tokens, hidden), dtype=self.setup.dtype,
                                           device=self.device.torch_device)
                    comm.recv(received, layout.previous(self.rank), stream=self.stream)
                    x, residual = received[0], received[1]
                x, residual = self.model.run_layers(x, residual, step)
                if not stage.is_last:
                    comm.send(torch.stack((x, residual)), layout.next(self.rank), stream=self.stream)
                    continue
                token_logits = self.model.every_token_head(x, residual) if scored.scores_prompt else None
                logits = token_logits.index_select(0, step.last_index) if scored.scores_prompt else \
                    self.model.head(x, residual, step)
                if self.samples:
                    sampled, packed = self._sample(logits, params, keys, scored, token_logits, batch, offset)
                    tokens.append(sampled)
                    logprobs += [packed] if packed is not None else []
                    offset += len(params)
            self._drop_ended(ended)
            if not self.samples:
                return None
            # the micro-batches' packed rows, in row order, as one step's (every one of the same width)
            packed = _same_width(logprobs) if logprobs else None
            ticket = self.io.publish(torch.cat(tokens), read_back=True, logprobs=packed)
            self.structured.published(ticket, self.io.read)
            return ticket

    def _sample(self, logits: torch.Tensor, sampling: list[SamplingParams | None],
                seeds: list[tuple[int, int] | None], layout: StepLayout, token_logits: torch.Tensor | None,
                batch: StepBatch, offset: int = 0,
                place_rows: Callable[[int, int], torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The rows' tokens and, when some rows ask for them, their packed logprobs (on the device;
        see :mod:`~anydev.core.sched.logprobs`), written where ``place_rows(rows, width)`` says when
        given (the step's readback: see ``StepIO.logprob_rows``). Rows with structured output have
        their grammar's mask applied (``offset``: the first row's index in the step, under pp's
        micro-batches)."""
        histories = self._histories(sampling, seeds, batch)
        generators = self.generators.rows(seeds)
        masks = self.structured.masks(sampling, seeds, offset)
        if masks is not None:
            tokens = sample_rows(logits, sampling, generators, histories, masks)
            self.structured.rejected(tokens, seeds)
        elif histories is None:
            tokens = sample_rows(logits, sampling, generators)
        else:
            tokens = sample_rows(logits, sampling, generators, histories)
        if histories is not None:
            for i, key in enumerate(seeds):
                if histories[i] is not None:
                    self.history.record(key[0], tokens[i:i + 1])
        if layout.empty:
            return tokens, None
        ids = batch.input_ids.tolist() if layout.scores_prompt else []
        out = place_rows(layout.num_rows, 1 + 2 * layout.k) if place_rows is not None else None
        return tokens, pack_step(self.model.kernels, layout, logits, tokens, token_logits, ids, out)

    def _histories(self, sampling: list[SamplingParams | None], seeds: list[tuple[int, int] | None],
                   batch: StepBatch) -> list | None:
        """Each row's token record (None: its request has no penalty), a new sequence's started from its
        prompt (this step computes the whole of it: see ``Sequence.computes_prompt_whole``)."""
        if not any(p is not None and uses_history(p) for p in sampling):
            return None
        ids, starts, rows = batch.input_ids.tolist(), batch.cu_seqlens_q.tolist(), []
        for i, (p, key) in enumerate(zip(sampling, seeds)):
            if p is None or not uses_history(p):
                rows.append(None)
                continue
            self.history.see(key[0], ids[starts[i]:starts[i + 1]] if p.repetition_penalty != 1.0 else [])
            rows.append(self.history.counts(key[0]))
        return rows

    def _drop_ended(self, ended: tuple[int, ...]) -> None:
        self.generators.drop(ended)
        self.history.drop(ended)
        if self.structured is not None:
            self.structured.matchers.drop(ended)

    def structured_sequences(self) -> list[int]:
        """The ids of the sequences whose grammar matchers this rank keeps (on the sampler)."""
        return self.structured.matchers.seq_ids() if self.structured is not None else []

    def penalized_sequences(self) -> list[int]:
        """The ids of the sequences whose token records this rank keeps (on the sampler)."""
        return self.history.seq_ids()

    def seeded_sequences(self) -> list[int]:
        """The ids of the sequences whose generators this rank keeps (on the sampler)."""
        return self.generators.seq_ids()

    def read_tokens(self, ticket: TokenTicket) -> list[int]:
        """The sampled tokens of a launched step (waits for that step only)."""
        return self.io.read(ticket)

    def _rank0_tokens(self, tokens: torch.Tensor | None, rows: int, device) -> torch.Tensor:
        """Rank 0's ``tokens`` on every rank: a sum over the ranks where only rank 0 adds non-zeros
        (int32: a collective dtype every backend has)."""
        mine = tokens.to(torch.int32) if tokens is not None else torch.zeros(rows, dtype=torch.int32, device=device)
        self.setup.comm.all_reduce(mine, op="sum", stream=self.stream)
        return mine.to(torch.int64)

    def kv_to_host(self) -> torch.Tensor:
        """A host copy of the whole KV pool, through the device API."""
        layout = self.kv.layout
        host = torch.empty(layout.nbytes, dtype=torch.uint8)
        self.stream.memcpy_async(host, self.kv.buffer)
        self.stream.synchronize()
        return host.view(layout.dtype).view(layout.shape)

    # ---- teardown --------------------------------------------------------------------------
    def release(self) -> list[BaseException]:
        """Free everything this rank allocated (on its thread). Returns the errors met on the way,
        so the caller can report them without losing the first one."""
        self.model = None
        errors = []
        events = self._zero_events or ()
        for obj in (self.pieces, self.graphs, *events, self.structured, self.io, self.kv, self.weights, self.stream):
            if obj is None:
                continue
            try:
                obj.close()
            except Exception as exc:  # collected and reported by the engine
                errors.append(exc)
        self._zero_events = None
        self.pieces = self.graphs = self.structured = self.io = self.kv = self.weights = self.stream = None
        return errors

    def shutdown(self) -> None:
        """Join this rank's thread (after its queued commands finish)."""
        self._executor.shutdown(wait=True)


def _same_width(packed: list[torch.Tensor]) -> torch.Tensor:
    """Packed logprobs rows of several micro-batches as one block, the narrower ones' top lists
    widened (with log-probability -inf, id 0) to the widest."""
    k = max((p.shape[1] - 1) // 2 for p in packed)

    def widened(p: torch.Tensor) -> torch.Tensor:
        have = (p.shape[1] - 1) // 2
        if have == k:
            return p
        pad = k - have
        values = torch.cat((p[:, 1:1 + have], p.new_full((p.shape[0], pad), float("-inf"))), dim=1)
        ids = torch.cat((p[:, 1 + have:], p.new_zeros((p.shape[0], pad))), dim=1)
        return torch.cat((p[:, :1], values, ids), dim=1)

    return torch.cat([widened(p) for p in packed])


def _with_blocks(layout: KVLayout, num_blocks: int) -> KVLayout:
    return KVLayout(layout.num_layers, num_blocks, layout.block_size, layout.num_kv_heads, layout.head_dim, layout.dtype)
