"""The executor interface: where the ranks of one engine run.

As in vLLM v1, the engine sees one :class:`Executor`, whichever runs its ranks, and reaches every
rank through one call (:meth:`Executor.run`, vLLM's ``collective_rpc``). An executor starts the ranks
(:meth:`start`), runs a method on every rank (:meth:`run`), collects the sampled tokens
(:meth:`sampled_tokens`), aborts the ranks after a failed step (inside :meth:`wait_step`), and closes
them (:meth:`close`). The implementations are in :mod:`.threads` and :mod:`.process_executor`; the names the
engine's config takes are in :mod:`.registry` (``docs/executors.md``: adding one).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from dataclasses import dataclass

from anydev.core import interrupts

from ..models.pipeline import RankLayout
from ..models.sharding import rank_shard
from ..rank.rank_worker import InitCancelled, KVRequest, RankSetup, RankWorker
from ..rank.worker_class import worker_class


@dataclass(frozen=True)
class RankPlan:
    """What every rank needs to build its :class:`RankSetup`: sent by rank 0 to the other processes."""

    config: object              # EngineConfig
    checkpoint: object          # a path, or the recipe of a checkpoint built in code (see checkpoint_source)
    dtype: object
    kv: KVRequest
    progress: bool
    max_model_len: int
    uses_graphs: bool
    read_threads: int
    max_step_tokens: int = 1    # the most tokens a step feeds (graph padding included)
    max_blocks: int = 1         # block-table width
    warm_steps: tuple = ()      # (decode buckets, token buckets) compiled while the weights load
    unique_id: bytes = b""
    #: At pp > 1: each stage's TP communicator id (``unique_id`` unused) and the id of the
    #: communicator of every rank, for send/recv between stages.
    stage_unique_ids: tuple = ()
    pipe_unique_id: bytes = b""

    @property
    def layout(self) -> RankLayout:
        return RankLayout(self.config.tp, self.config.pp)

    def join_communicators(self, device, rank: int):
        """Rank ``rank``'s (TP communicator, pipeline communicator or None), joined in that order on
        every rank (each call blocks until every rank of the group has joined)."""
        from anydev.plugin_api import Communicator

        layout = self.layout
        stage, tp_rank = layout.position(rank)
        tp_id = self.stage_unique_ids[stage] if layout.pp > 1 else self.unique_id
        comm = Communicator.from_unique_id(device, tp_id, layout.tp, tp_rank)
        if layout.pp == 1:
            return comm, None
        try:
            return comm, Communicator.from_unique_id(device, self.pipe_unique_id, layout.world, rank)
        except BaseException:
            comm.close()
            raise

    @property
    def worker_class(self) -> type[RankWorker]:
        """The class every rank is built from (``EngineConfig.worker_cls``)."""
        return worker_class(self.config.worker_cls)

    def rank_setup(self, rank: int, device, comm, checkpoint, kernels, pipe_comm=None) -> RankSetup:
        """Rank ``rank`` of the layout's ``tp * pp``; its pipeline ``pipe_comm`` is the caller's."""
        c, layout = self.config, self.layout
        stage, tp_rank = layout.position(rank)
        return RankSetup(rank, device, comm, checkpoint, rank_shard(checkpoint.config, c.tp, tp_rank), self.dtype, self.kv,
                         self.progress, kernels, self.max_model_len,
                         staging_bytes=c.weight_staging_bytes, read_threads=self.read_threads,
                         max_step_rows=c.max_num_seqs, max_step_tokens=self.max_step_tokens, max_blocks=self.max_blocks,
                         stage=layout.stages(checkpoint.config.num_hidden_layers)[stage], layout=layout,
                         pipe_comm=pipe_comm, quantization=c.quantization, seed=c.seed,
                         warm_steps=self.warm_steps)


class Executor(ABC):
    """Runs the ranks of one engine. ``workers`` are the engine's handles on them, in rank order
    (each has ``submit(fn, *args) -> Future``, running ``fn`` on that rank); ``communicators`` are
    the communicators this process holds."""

    #: The name ``EngineConfig.executor`` gives it (see :mod:`.registry`).
    name: str = ""

    def __init__(self, config, backend, layout: RankLayout):
        self.config, self.backend, self.layout = config, backend, layout
        self.workers: list = []
        self.communicators: list = []

    @classmethod
    def check_config(cls, config) -> None:
        """Raise :class:`EngineConfigError` for a setting this executor cannot run (before any weights
        load); ``__init__`` checks the backend and the launch."""

    # ---- the interface -------------------------------------------------------------------------
    @abstractmethod
    def start(self, plan: RankPlan, checkpoint, kernels, timeline, cancel) -> None:
        """Start every rank (each a ``plan.worker_class``) and run its init; raise the first rank's failure once every rank stopped.
        ``cancel`` (an Event) tells the ranks still initialising to stop."""

    def run(self, method: str, *args, sampler_args: tuple | None = None) -> list[Future]:
        """``method(*args)`` on every rank, at once (``sampler_args``: the sampler's own arguments);
        the futures in rank order."""
        return [w.submit(getattr(w, method), *(sampler_args if sampler_args is not None and w is self.sampler
                                               else args))
                for w in self.workers]

    @property
    def sampler(self):
        """The rank whose tokens are the step's (tp rank 0 of the last stage)."""
        return self.workers[self.layout.sampler]

    def sampled_tokens(self, ticket) -> list[int]:
        """The tokens a launched step sampled (``ticket``: what its sampler's step returned)."""
        return interrupts.result(self.sampler.submit(self.sampler.read_tokens, ticket))

    def wait_init(self, futures, cancel) -> None:
        """Wait for an init command on every rank; on the first failure stop the others
        (``cancel``, and :meth:`abort` for ranks blocked in a collective) and raise it."""
        try:
            done, _ = interrupts.wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:   # e.g. Ctrl-C while waiting: stop every rank before unwinding
            cancel.set()
            wait(futures)
            raise
        if not any(f.exception() is not None for f in done):
            return
        cancel.set()
        self.abort_after_init_failure()
        wait(futures)
        errors = [f.exception() for f in futures if f.exception() is not None]
        real = [e for e in errors if not isinstance(e, InitCancelled)]
        raise min(real, key=lambda e: getattr(e, "rank", 0)) if real else errors[0]

    def wait_step(self, futures) -> None:
        """Wait for a step on every rank (``futures`` in rank order); raise the first rank's error."""
        done, _ = interrupts.wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            raise self.step_failed(futures, futures.index(failed[0]), failed[0].exception())

    def check(self) -> None:
        """Raise when an earlier failure left the ranks unusable."""

    @property
    def failure(self) -> BaseException | None:
        """The failure that stopped the ranks (already raised once), or None."""
        return None

    @abstractmethod
    def close(self) -> list[BaseException]:
        """Free every rank (its memory on its own thread), end the ranks, close the communicators;
        the errors met. Safe to call after a partial :meth:`start`."""

    # ---- what implementations refine --------------------------------------------------------------
    def abort_after_init_failure(self) -> None:
        """Free ranks blocked in a collective with a rank whose init failed."""

    def step_failed(self, futures, index: int, error: BaseException) -> BaseException:
        """The error to raise for a step that failed on rank ``index`` (after stopping the others)."""
        return error

    def release_workers(self) -> list[BaseException]:
        """Every worker frees its memory on its own thread, then its thread ends; the errors met."""
        problems = []
        for worker in self.workers:
            try:
                problems += worker.submit(worker.release).result()
            except Exception as exc:
                problems.append(exc)
        for worker in self.workers:
            worker.shutdown()
        return problems
