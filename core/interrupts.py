"""Ctrl-C (SIGINT) and SIGTERM while an engine runs: a flag, raised only at safe points.

Python raises ``KeyboardInterrupt`` in the main thread between any two bytecodes: inside a lock's
``with`` block, a ``Condition.wait``, ``ThreadPoolExecutor.submit``... A lock left held there blocks
the engine's close for ever (the rank threads and their futures take the same locks). So while
:func:`handled` is in force (the command-line entry points, see :func:`anydev.core.exits.run_command`) and an
engine is live (:func:`engine_live` .. :func:`engine_gone`), the signal handler only records the
signal; the engine's waits (:func:`wait`, :func:`result`) look at the record every ``POLL_S`` and
raise :class:`Interrupted` there, on the main thread, outside any lock. With no engine live the
handler raises at once, as Python's own does. A second signal ends the process at once.

Without :func:`handled` (the Python API in someone else's program) nothing changes: the waits are
plain waits and Python's own handler runs.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from concurrent import futures as _futures
from contextlib import contextmanager

#: How often a deferred wait looks whether a signal came.
POLL_S = 0.05
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The one line a command prints when a signal ends it.
LINES = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


class Interrupted(KeyboardInterrupt):
    """A signal (``signum``) ended the command; it exits with ``128 + signum``."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def line(self) -> str:
        return LINES.get(self.signum, f"ended by signal {self.signum}")


class _State:
    """Written by the signal handler, which must take no lock: plain attributes only."""

    installed = False
    main_ident: int | None = None
    received: int | None = None      # the first signal seen while deferring
    raised = False                   # whether a safe point raised it already (it is raised once)
    live: set = set()                # ids of the live engines (set.add/discard are atomic)


def received() -> int | None:
    """The signal recorded and not yet raised, if any."""
    return _State.received


def _handler(signum, frame) -> None:
    if _State.received is not None:   # a second signal: the user insists
        _end_now(_State.received, frame)
    _State.received = signum          # (also when raised now: whatever error it causes, the command reports it)
    if not _State.live:
        _State.raised = True
        raise Interrupted(signum)     # no rank threads to leave stuck: as Python's own handler


@contextmanager
def handled():
    """Install the deferring handler for SIGINT and SIGTERM (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread() or _State.installed:
        yield
        return
    previous = {sig: signal.signal(sig, _handler) for sig in SIGNALS}
    previous_hook, sys.unraisablehook = sys.unraisablehook, _sending_again(sys.unraisablehook)
    _State.installed, _State.main_ident, _State.received, _State.raised = True, threading.get_ident(), None, False
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = previous_hook
        _State.installed = False


def _sending_again(hook):
    """``sys.unraisablehook`` while the handler is installed. Python prints and drops an exception
    raised in a weakref callback or a ``__del__`` (importlib's module-lock callbacks run during any
    import): the handler's :class:`Interrupted`, dropped so, is forgotten and its signal sent again
    from another thread, so that the handler raises it at a point where it propagates."""
    def unraisable(info) -> None:
        if not isinstance(info.exc_value, Interrupted) or _State.live:
            return hook(info)
        _State.received, _State.raised = None, False
        threading.Thread(target=_send_later, args=(info.exc_value.signum,), name="anydev-signal-again",
                         daemon=True).start()
    return unraisable


def _send_later(signum: int) -> None:
    """Send ``signum`` to this process once the main thread has left the hook (an exception raised
    inside the hook itself would be dropped too)."""
    import time

    time.sleep(POLL_S)
    os.kill(os.getpid(), signum)


def check() -> None:
    """A safe point: raise :class:`Interrupted` on the main thread if a signal was recorded (once)."""
    signum = _State.received
    if signum is not None and not _State.raised and threading.get_ident() == _State.main_ident:
        _State.raised = True
        raise Interrupted(signum)


def _deferring() -> bool:
    return _State.installed and threading.get_ident() == _State.main_ident


def wait(fs, return_when=_futures.ALL_COMPLETED):
    """``concurrent.futures.wait`` that is a safe point (see the module's docstring)."""
    if not _deferring():
        return _futures.wait(fs, return_when=return_when)
    while True:
        check()
        done, pending = _futures.wait(fs, timeout=POLL_S, return_when=return_when)
        if not pending or (return_when == _futures.FIRST_COMPLETED and done) or (
                return_when == _futures.FIRST_EXCEPTION and any(f.exception() is not None for f in done)):
            return done, pending


def result(future):
    """``future.result()`` that is a safe point."""
    wait([future])
    return future.result()


def join(thread: threading.Thread, timeout: float) -> None:
    """``thread.join(timeout)`` that is a safe point."""
    check()
    thread.join(timeout)
    check()


def engine_live(engine) -> None:
    """From here on, a signal is recorded, not raised (the engine has rank threads). A signal
    recorded before it ends the command here, before any rank starts: raised where no engine was
    live, it was swallowed on its way out (C code that clears every error, as some of torch's
    import-time calls do, runs the handler and drops its exception), or the command would not be
    starting an engine."""
    if _deferring() and _State.received is not None:
        _State.raised = True
        raise Interrupted(_State.received)
    _State.live.add(id(engine))


def engine_gone(engine, unwinding: bool) -> None:
    """``engine`` is closed. The last live one gone, a signal recorded meanwhile is raised now,
    unless an exception is already ``unwinding`` (the command's end reports the signal)."""
    _State.live.discard(id(engine))
    if not _State.live and not unwinding:
        check()


def _end_now(signum, frame) -> None:
    os.write(2, (Interrupted(signum).line + "\n").encode())
    os._exit(128 + signum)


def end_at_signal() -> None:
    """From here on (the command is over; the process is exiting), a signal prints its line and
    ends the process at once with 128 + the signal."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _end_now)
