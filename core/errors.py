"""Errors the engine raises at its boundaries (configuration, rank initialisation)."""
from __future__ import annotations

from anydev.plugin_api.errors import AnydevError


class EngineConfigError(AnydevError, ValueError):
    """The engine cannot run as asked: tensor-parallel size, memory, sampling values, prompt length.

    The message says what was wrong and what would work instead.
    """


class EngineInitError(AnydevError):
    """A rank failed while the engine was starting; every rank was stopped and its memory freed.

    ``rank`` and ``phase`` name where it failed; ``cause`` is the original exception (also chained as
    ``__cause__``).
    """

    def __init__(self, rank: int, phase: str, cause: BaseException):
        self.rank = rank
        self.phase = phase
        self.cause = cause
        super().__init__(f"rank {rank} failed during '{phase}': {type(cause).__name__}: {cause}")
