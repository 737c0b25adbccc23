"""The process executors, ``mp`` and ``torchrun``: one process per rank, rank 0 (this process) drives.

* ``mp`` (:class:`MpExecutor`): one process per rank on this machine; this process is rank 0 and
  starts the others (``python -m anydev.core.executors.rank_process``) with torchrun's variables set,
  as torchrun would.
* ``torchrun`` (:class:`TorchrunExecutor`): one process per rank started by torchrun (or any launcher
  setting its variables), on any number of machines; the process of ``RANK=0`` builds the engine, the
  others run :func:`anydev.core.executors.rank_process.follow`.

In both, rank 0 drives (:class:`~.process_ranks.ProcessRanks`): the engine sees a
:class:`~.rank_proxies.LocalRank` (its own RankWorker, whose every command is first broadcast to the
others) and one :class:`~.rank_proxies.RemoteRank` per other process, whose futures resolve with that
rank's reply, or, for the steps (no reply: the hot path), are rank 0's own step's future.
"""
from __future__ import annotations

from ..errors import EngineConfigError
from ..models.pipeline import RankLayout
from .abort import close_communicators
from .base import Executor, RankPlan
from .group_errors import LaunchError
from .launch import Launch, check_local_device, check_world_size, launch_from_env
from .process_ranks import ProcessRanks


class ProcessExecutor(Executor):
    """Rank 0's side of a process executor: its own rank a thread here, the others processes."""

    def __init__(self, config, backend, layout: RankLayout):
        super().__init__(config, backend, layout)
        if not backend.runtime.cross_process_collectives:
            raise EngineConfigError(f"backend '{backend.name}' ({backend.runtime.hardware_label}) joins communicators of "
                                    f"one process only; executor {self.name!r} runs a process per rank: use "
                                    "executor='threads'")
        self.group: ProcessRanks | None = None

    def _group(self) -> "ProcessRanks":
        """The group of rank processes, formed (rank 0's side)."""
        raise NotImplementedError

    def start(self, plan: RankPlan, checkpoint, kernels, timeline, cancel) -> None:
        self.group = self._group()
        device = self.backend.device(self.group.local_rank)
        comm, pipe_comm = self.group.start(plan, checkpoint, device)
        self.communicators = [comm] + ([pipe_comm] if pipe_comm is not None else [])
        setup = plan.rank_setup(0, device, comm, checkpoint, kernels, pipe_comm)
        self.workers = self.group.workers(plan.worker_class(setup, timeline, cancel), timeline)
        self.wait_init(self.run("init"), cancel)

    @property
    def failure(self) -> BaseException | None:
        return self.group.failure if self.group is not None else None

    def close(self) -> list[BaseException]:
        """The other processes destroy their communicators while rank 0 does (see :meth:`ProcessRanks.close`)."""
        problems = self.release_workers()
        if self.group is not None:
            problems += self.group.close(lambda: close_communicators(self.communicators))
        self.workers, self.communicators = [], []
        return problems


class MpExecutor(ProcessExecutor):
    """``mp``: this process is rank 0 and starts ranks 1.. as processes of this machine."""

    name = "mp"

    def __init__(self, config, backend, layout: RankLayout):
        super().__init__(config, backend, layout)
        check_local_device(Launch(0, layout.world, 0, "127.0.0.1", 0), backend)

    def _group(self) -> "ProcessRanks":
        return ProcessRanks.spawn(self.layout.world)


class TorchrunExecutor(ProcessExecutor):
    """``torchrun``: every rank a process started by torchrun; this one is ``RANK=0``."""

    name = "torchrun"

    def __init__(self, config, backend, layout: RankLayout):
        super().__init__(config, backend, layout)
        launch = launch_from_env()
        if launch is None:
            raise LaunchError("executor='torchrun' needs the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, "
                              "MASTER_ADDR, MASTER_PORT): launch with torchrun, or use executor='mp' on one machine")
        if launch.rank != 0:
            raise LaunchError(f"this process is rank {launch.rank}: only rank 0 builds the engine; the other ranks run "
                              "anydev.core.executors.rank_process.follow() (test_infer.py and `anydev serve` do so "
                              "themselves)")
        check_world_size(launch, layout.tp, layout.pp)
        check_local_device(launch, backend)
        self._launch_env = launch

    def _group(self) -> "ProcessRanks":
        return ProcessRanks.launched(self._launch_env)
