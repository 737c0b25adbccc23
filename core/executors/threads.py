"""The ``threads`` executor (the default): every rank a :class:`~..rank.rank_worker.RankWorker`
thread of this process, each driving its own device."""
from __future__ import annotations

from concurrent.futures import wait

from ..models.pipeline import RankLayout
from .abort import ABORT_WAIT_S, abort_communicators, close_communicators
from .base import Executor, RankPlan
from .group_errors import RankFailedError


class ThreadExecutor(Executor):
    """Ranks as threads, every rank's init started at once. A failed step or init aborts every communicator (contract 1.4, where the
    backend can), so that the ranks blocked in a collective with the failed one are freed."""

    name = "threads"

    def __init__(self, config, backend, layout: RankLayout):
        super().__init__(config, backend, layout)
        layout.check_devices(backend)
        self._failed: tuple[int, BaseException] | None = None   # (rank, error) of a step that broke the ranks

    def start(self, plan: RankPlan, checkpoint, kernels, timeline, cancel) -> None:
        layout, backend = self.layout, self.backend
        devices = [backend.device(rank) for rank in range(layout.world)]
        # One TP communicator per stage (rank stage*tp + j is its rank j); at pp > 1, one more over
        # every rank, for send/recv between stages.
        self.communicators = [comm for stage in range(layout.pp)
                              for comm in backend.create_communicators([devices[r] for r in layout.stage_ranks(stage)])]
        pipe_comms = [None] * layout.world
        if layout.pp > 1:
            pipe_comms = backend.create_communicators(devices)
            self.communicators += pipe_comms
        setups = [plan.rank_setup(rank, devices[rank], self.communicators[rank], checkpoint, kernels, pipe_comms[rank])
                  for rank in range(layout.world)]
        self.init_ranks([plan.worker_class(setup, timeline, cancel) for setup in setups], cancel)

    def init_ranks(self, workers: list, cancel) -> None:
        """Run the init of the created ``workers`` (kept in ``self.workers``, so that :meth:`close`
        frees them whatever happens): every one at once, then wait for all (InfiniLM's order)."""
        self.workers = workers
        self.wait_init(self.run("init"), cancel)

    def abort_after_init_failure(self) -> None:
        abort_communicators(self.communicators)   # ranks blocked in a collective with the failed one end too

    def step_failed(self, futures, index: int, error: BaseException) -> BaseException:
        """The other ranks may wait for the failed one in a collective forever: when the backend can
        abort communicators (contract 1.4) every communicator is aborted and their steps end too
        (the ranks are then unusable: :meth:`check` says so)."""
        if len(self.workers) > 1 and self.backend.supports("comm_abort"):
            self._failed = (self.workers[index].rank, error)
            for problem in abort_communicators(self.communicators):
                error.add_note(f"while aborting the communicators: {type(problem).__name__}: {problem}")
            wait(futures, timeout=ABORT_WAIT_S)   # the other ranks' steps end with their aborted collectives
        return error

    def check(self) -> None:
        if self._failed is not None:
            rank, error = self._failed
            raise RankFailedError(rank, f"an earlier step raised {type(error).__name__}: {error}; every rank was "
                                  "stopped (communicators aborted): close this engine and create a new one") from error

    @property
    def failure(self) -> BaseException | None:
        return self._failed[1] if self._failed is not None else None

    def close(self) -> list[BaseException]:
        problems = self.release_workers() + close_communicators(self.communicators)
        self.workers, self.communicators = [], []
        return problems
