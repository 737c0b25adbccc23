"""Fault injection into the engine's init, for the tests and the conformance suite: a
:class:`~anydev.core.rank.rank_worker.RankWorker` whose rank ``r`` raises on entering init phase
``p``, chosen through the engine's one extension point for ranks::

    EngineConfig(..., worker_cls=failing_worker(2, "kv zero"))

The name :func:`failing_worker` gives encodes the fault (``FailAt_2_kv_zero``); this module makes the
class of such a name on first use, in whichever process imports it, so that the rank processes of
executors "mp" and "torchrun" build the same failing worker from the config they receive.
"""
from __future__ import annotations

from anydev.core.errors import EngineConfigError
from anydev.core.rank.rank_worker import RankWorker
from anydev.core.timeline import PHASES

_PREFIX = "FailAt_"


def failing_worker(rank: int, phase: str) -> str:
    """The ``worker_cls`` of a RankWorker whose rank ``rank`` raises RuntimeError("injected fault ...")
    on entering init phase ``phase`` (one of ``anydev.core.timeline.PHASES``)."""
    return f"{__name__}:{_PREFIX}{int(rank)}_{phase.replace(' ', '_')}"


class FailingWorker(RankWorker):
    """A RankWorker with a fault: rank ``fail_at[0]`` raises on entering init phase ``fail_at[1]``."""

    fail_at: tuple[int, str] = (-1, "")

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        phase = cls.fail_at[1]
        if phase not in PHASES:
            raise EngineConfigError(f"fail_at phase must be one of {PHASES}, got {phase!r}")

    def enter_phase(self, phase: str):
        if (self.rank, phase) == self.fail_at:
            raise RuntimeError(f"injected fault (fail_at={self.fail_at!r})")
        return super().enter_phase(phase)


def __getattr__(name: str) -> type[FailingWorker]:
    """The FailingWorker subclass :func:`failing_worker` names, made once per process."""
    rank, _, phase = name.removeprefix(_PREFIX).partition("_")
    if not name.startswith(_PREFIX) or not rank.isdigit():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = type(name, (FailingWorker,), {"fail_at": (int(rank), phase.replace("_", " ")), "__module__": __name__})
    globals()[name] = made
    return made
