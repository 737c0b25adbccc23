"""Crash isolation: a check that kills its process costs only its check group.

The suite runs its checks in pytest-xdist workers (``python -m anydev.conformance`` uses one worker
unless ``-n`` says otherwise). When a backend segfaults, aborts, or hangs where no thread guard of the
suite can catch it, xdist reports the check its worker was running and starts a new worker. This
module adds what xdist does not say:

* which signal killed the worker and the innermost frame of the thread that crashed it, from a log
  that ``faulthandler`` writes per worker (:func:`start_worker_log`);
* a hang: a check that has not finished after :data:`CHECK_TIMEOUT_S` makes faulthandler dump every
  thread and end the worker (:func:`watchdog`), which xdist then reports like a crash;
* the group is marked crashed for that backend (:func:`mark_crashed`), so that the workers skip its
  remaining checks (:func:`crash_of`) instead of crashing again on each.

The controller and its workers share a folder, named by ``$ANYDEV_CONFORMANCE_CRASH_DIR``, which the
controller creates before the workers start (they inherit it). Without xdist (``-n 0``, or plain
``pytest``) nothing isolates a crash: it ends the session, and no report is written.
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

CRASH_DIR_ENV = "ANYDEV_CONFORMANCE_CRASH_DIR"
#: A check still running after this many seconds ends its worker as hung
#: (``$ANYDEV_CONFORMANCE_CHECK_TIMEOUT`` overrides it). It is far above the suite's own hang limit
#: for collectives and engine init (120 s), which fails a check without ending its process.
CHECK_TIMEOUT_S = float(os.environ.get("ANYDEV_CONFORMANCE_CHECK_TIMEOUT") or 600.0)

#: What faulthandler writes for each fatal signal ("Fatal Python error: Segmentation fault").
SIGNALS = {
    "Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
    "Floating-point exception": "SIGFPE", "Illegal instruction": "SIGILL",
}
NO_RECORD = ("killed without a fatal-signal record (SIGKILL, e.g. by the out-of-memory killer, "
             "or the process exited)")


@dataclass(frozen=True)
class Crash:
    """A check group of one backend that lost its process."""

    backend: str
    group: str
    check: str  # the node id of the check that was running: the last check started
    signal: str  # "SIGSEGV", "SIGABRT", ..., "hang", or NO_RECORD
    where: str  # the innermost frame of the crashing thread, as faulthandler wrote it ("" if none)

    def describe(self) -> str:
        return f"{self.signal}" + (f" at {self.where}" if self.where else "")


# ---- in each worker --------------------------------------------------------------------------

_log = None  # this worker's crash log (an open file): faulthandler writes into it


def start_worker_log(worker_id: str) -> None:
    """Point faulthandler at this worker's crash log (every thread's stack on a fatal signal)."""
    global _log
    directory = os.environ.get(CRASH_DIR_ENV)
    if not directory:
        return
    _log = open(worker_log_path(directory, worker_id), "w")
    faulthandler.enable(file=_log, all_threads=True)


@contextlib.contextmanager
def watchdog():
    """End this worker, dumping every thread's stack into its crash log, when the block has not
    finished after :data:`CHECK_TIMEOUT_S` (only in a worker that has a crash log)."""
    if _log is None:
        yield
        return
    faulthandler.dump_traceback_later(CHECK_TIMEOUT_S, exit=True, file=_log)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def crash_of(backend: str, group: str) -> Crash | None:
    """The crash of ``backend``'s ``group`` in this session, if one was recorded."""
    directory = os.environ.get(CRASH_DIR_ENV)
    if not directory:
        return None
    marker = _marker_path(directory, backend, group)
    try:
        return Crash(**json.loads(marker.read_text()))
    except FileNotFoundError:
        return None


# ---- on the controller -----------------------------------------------------------------------

def read_crash(backend: str, group: str, check: str, worker_id: str) -> Crash:
    """What the crashed worker's log says about the crash of ``check``."""
    directory = os.environ.get(CRASH_DIR_ENV)
    try:
        text = worker_log_path(directory, worker_id).read_text(errors="replace") if directory else ""
    except FileNotFoundError:
        text = ""
    signal, where = parse_log(text)
    return Crash(backend, group, check, signal, where)


def parse_log(text: str) -> tuple[str, str]:
    """``(signal, innermost frame of the crashing thread)`` from a faulthandler log."""
    fatal = re.search(r"Fatal Python error: ([^\n]+)", text)
    timeout = re.search(r"Timeout \(([0-9:.]+)\)!", text)
    if fatal:
        signal = SIGNALS.get(fatal.group(1).strip(), fatal.group(1).strip())
    elif timeout:
        signal = f"hang (the check ran past the {timeout.group(1)} limit)"
    else:
        return NO_RECORD, ""
    # The crashing thread is "Current thread"; after a timeout, the main thread shows where it hangs.
    header = re.search(r"^(Current thread|Thread) 0x[0-9a-f]+[^\n]*\n", text[fatal.end() if fatal else 0:], re.MULTILINE)
    frame = ""
    if header:
        rest = text[(fatal.end() if fatal else 0) + header.end():]
        first = re.match(r"\s*File \"([^\"]+)\", line (\d+) in (\S+)", rest)
        if first:
            frame = f"{os.path.basename(first.group(1))}:{first.group(2)} in {first.group(3)}"
    return signal, frame


def mark_crashed(crash: Crash) -> None:
    """Record the crash for the workers: the rest of the group is skipped."""
    directory = os.environ.get(CRASH_DIR_ENV)
    if directory:
        marker = _marker_path(directory, crash.backend, crash.group)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(asdict(crash)))


def backend_of(nodeid: str, names: list[str]) -> str | None:
    """The backend of a check, from its node id's parameters (``test_x[cpu-2ranks]`` → ``cpu``):
    the longest backend name that the parameter id starts with."""
    params = nodeid.partition("[")[2].removesuffix("]")
    matches = [n for n in names if params == n or params.startswith(n + "-")]
    return max(matches, key=len) if matches else None


def group_of(nodeid: str) -> str:
    """``conformance/test_memory.py::test_x[cpu]`` → ``memory`` (as ``conftest.py`` names groups); a
    group's domain checks (``test_memory_domains.py``) belong to the group."""
    module = nodeid.split("::")[0].rsplit("/", 1)[-1]
    return module.removesuffix(".py").removeprefix("test_").removesuffix("_domains")


def worker_log_path(directory: str, worker_id: str) -> Path:
    return Path(directory) / f"{worker_id}.log"


def _marker_path(directory: str, backend: str, group: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{backend}@{group}")
    return Path(directory) / "crashed" / f"{safe}.json"
