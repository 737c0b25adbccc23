"""How a command-line entry point ends: one line on stderr and an exit code, never a traceback.

Every entry point (``anydev``'s subcommands, ``examples/test_infer.py``, the benchmarks) runs its
body through :func:`run_command`. This module imports nothing heavy (no torch), so that an entry
point can hand itself over before its imports: a Ctrl-C while torch loads ends in one line too.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
from typing import Callable

from anydev.core import interrupts

#: Exit code when stdout's reader went away (``| head``), as shells report SIGPIPE (128 + 13).
BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE


def run_command(run: Callable[..., int], *args) -> int:
    """Run a command-line entry point and return its exit code. The one place where a command's
    end becomes one line on stderr, never a traceback:

    * an :class:`AnydevError`: ``error: ...``, exit code 2 (under torchrun, said by rank 0 only: a bad
      launch fails every rank alike);
    * Ctrl-C or SIGTERM: ``interrupted`` or ``terminated``, exit code 130 or 143 (128 + the signal),
      whatever error the signal caused on its way out (see :mod:`.interrupts`);
    * stdout closed by its reader (``anydev list-backends --json | head -1``): nothing, exit code 141.

    ``run`` releases what it holds on the way out. Other exceptions are bugs and propagate."""
    with interrupts.handled():
        try:
            _import_numpy_before_torch()
            code = run(*args)
            sys.stdout.flush()   # a reader that went away is met here, not in the interpreter's exit
        except SystemExit:
            raise
        except BaseException as exc:  # each kind below is one line; anything else is re-raised
            code = _ending(exc)
        signum = interrupts.received()
    if signum is not None and code not in (128 + signum, BROKEN_PIPE_EXIT):   # recorded, never raised
        return _ending(interrupts.Interrupted(signum))
    return code


def _import_numpy_before_torch() -> None:
    """Import numpy from Python, before torch imports it from C: torch's C import of numpy (its
    ``is_numpy_available``) clears whatever exception that import raises, so a Ctrl-C that lands
    while numpy loads under ``import torch`` would be lost (the run going on until an engine starts:
    see :func:`anydev.core.interrupts.engine_live`). Imported here, its exception propagates."""
    import numpy  # noqa: F401  (imported for its side effect: in sys.modules before torch asks)


def _ending(exc: BaseException) -> int:
    signum = interrupts.received()
    if signum is not None or isinstance(exc, KeyboardInterrupt):
        interrupt = interrupts.Interrupted(signum or getattr(exc, "signum", signal.SIGINT))
        print(interrupt.line, file=sys.stderr, flush=True)
        return interrupt.exit_code
    if isinstance(exc, BrokenPipeError):
        _silence_stdout()
        return BROKEN_PIPE_EXIT
    from anydev.plugin_api.errors import AnydevError   # (imported here: see the module's docstring)

    if isinstance(exc, AnydevError):
        if os.environ.get("RANK", "0") in ("", "0"):   # torchrun's other ranks meet the same error: rank 0 says it
            print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    raise exc


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def exit_process(code: int) -> None:
    """End the process with ``code`` (a script's last call: ``exit_process(main())``): the atexit
    functions run and the streams are flushed, then the process ends without the interpreter's
    teardown. That teardown (the garbage collection of torch's objects) can take seconds on a busy
    machine and runs no signal handler: a Ctrl-C then would wait for it, or be lost. From here on a
    signal ends the process at once, with its line and 128 + the signal."""
    interrupts.end_at_signal()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken stream: nothing more can be said on it
            pass
    os._exit(code)
