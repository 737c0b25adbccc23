"""Errors the engine raises at its boundaries (configuration, rank initialisation)."""
from __future__ import annotations

import sys
from typing import Callable

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


def run_command(run: Callable[..., int], *args) -> int:
    """Run a command-line entry point: an :class:`AnydevError` becomes one ``error: ...`` line on
    stderr and exit code 2, not a traceback. Other exceptions are bugs and propagate."""
    try:
        return run(*args)
    except AnydevError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
