"""The typed errors of a group of rank processes: a wrong launch, a failed rank, a lost control group."""
from __future__ import annotations

from anydev.plugin_api.errors import AnydevError


class LaunchError(AnydevError):
    """A rank process was launched wrongly: a torchrun variable missing or malformed, a world size
    that does not match the engine's ranks, or a store that cannot be reached. The message says how
    to launch instead."""


class RankFailedError(AnydevError):
    """A rank of a process group died, hung or raised; every rank of the group stops. ``rank`` names it."""

    def __init__(self, rank: int, reason: str):
        self.rank = rank
        self.reason = reason
        super().__init__(f"rank {rank} failed: {reason}")

    def __reduce__(self):
        return RankFailedError, (self.rank, self.reason)


class ControlLost(AnydevError):
    """The control group broke: a peer process (usually rank 0) is gone."""


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
