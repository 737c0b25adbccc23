"""The engine's start-up and release: the rank plan made from the config, the executor started, graphs captured.

Start-up follows InfiniLM's fixed design: the engine makes every communicator at once, creates every
rank worker, and only then waits for all of them. Each rank zeroes its KV cache with one async
memset and synchronises once. The ranks are built from ``EngineConfig.worker_cls`` (a
:class:`~.rank.rank_worker.RankWorker` subclass) and run by the executor ``EngineConfig.executor`` names.
"""
from __future__ import annotations

import threading
import time

from anydev.plugin_api import load_backend

from .engine_config import default_read_threads, resolve_dtype, validate_config
from .errors import EngineConfigError, EngineInitError
from .executors.base import RankPlan
from .executors.registry import make_executor
from .rank.graphs import batch_buckets
from .rank.kernel_choice import select_kernels
from .rank.piecewise import token_buckets
from .rank.rank_worker import KVRequest
from .rank.worker_class import worker_class
from .sched.block_manager import BlockManager
from .sched.scheduler import Scheduler
from .timeline import CAPTURE_PHASES, PHASES, Timeline


class EngineStartup:
    """:class:`~.engine.InferEngine`'s start-up and release (a part of the engine: its state is the engine's)."""

    def _start(self, progress: bool) -> None:
        config, model = self.config, self.checkpoint.config
        validate_config(config, model)
        self.max_model_len = config.max_model_len or model.max_position_embeddings
        self.backend = load_backend(config.device)
        executor = make_executor(config, self.backend)   # checks the devices and the launch; starts nothing
        self.dtype = resolve_dtype(config, self.backend)
        kernels_start = time.perf_counter()
        self.kernels = select_kernels(self.backend, config.kernels)
        self.kernels_load_seconds = time.perf_counter() - kernels_start   # (imports the kernels' modules: Triton)
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
        self.graph_buckets = batch_buckets(config.max_num_seqs) if self.uses_graphs else []
        pieces = min(config.piecewise_max_tokens, budget) if self.uses_graphs else 0
        self.token_buckets = token_buckets(pieces) if pieces else []
        #: The buckets whose kernels every rank compiles while its weights load (all of them, lazy or not).
        self.warm_steps = (tuple(self.graph_buckets), tuple(self.token_buckets)) \
            if config.warm_kernels and self.uses_graphs else ()
        plan = RankPlan(config, "", self.dtype, kv, progress, self.max_model_len, self.uses_graphs,
                        config.weight_read_threads or default_read_threads(config.tp * config.pp),
                        max_step_tokens=max(budget, config.max_num_seqs), max_blocks=blocks_per_seq,
                        warm_steps=self.warm_steps)
        self.executor = executor
        start = time.perf_counter()
        try:
            executor.start(plan, self.checkpoint, self.kernels, timeline, cancel)
            self.init_seconds = time.perf_counter() - start
            #: The buckets captured at start-up (lazy_graphs: the smallest of each; the rest between steps).
            self.startup_buckets = (self.graph_buckets[:1], self.token_buckets[:1]) if config.lazy_graphs else \
                (self.graph_buckets, self.token_buckets)
            #: The buckets start-up left out, captured one at a time between steps (see StepLoop.capture_next_graph):
            #: (rows, None) for a decode bucket, (None, tokens) for a token bucket, smallest first.
            self.pending_graphs = [(rows, None) for rows in self.graph_buckets[1:]] + \
                [(None, tokens) for tokens in self.token_buckets[1:]] if config.lazy_graphs else []
            if self.uses_graphs:   # every rank at once: the collectives inside the captures line up
                executor.wait_init(executor.run("capture_graphs", *self.startup_buckets), cancel)
            self.capture_seconds = time.perf_counter() - start - self.init_seconds
        except BaseException as exc:
            self._release_all(exc)
            if isinstance(exc, EngineInitError) and isinstance(exc.cause, EngineConfigError):
                raise exc.cause from None   # e.g. the KV cache does not fit: a config problem, said as such
            raise
        records = sorted(timeline.records, key=lambda r: (r.rank, r.start))
        #: Each rank's init phases (``PHASES``), then the parts of its start-up captures (``CAPTURE_PHASES``).
        self.timeline = sorted((r for r in records if r.phase in PHASES), key=lambda r: (r.rank, PHASES.index(r.phase)))
        self.capture_timeline = [r for r in records if r.phase in CAPTURE_PHASES]
        self.num_blocks = min(w.kv.layout.num_blocks for w in self.workers)
        self.block_manager = BlockManager(self.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, budget, config.enable_chunked_prefill)

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
