"""A rank process other than rank 0: it builds its rank from rank 0's plan, then runs what rank 0
sends until rank 0 says exit (see :mod:`.process_ranks` and :mod:`.control_group`).

    python -m anydev.core.executors.rank_process     # what executor="mp" starts, with torchrun's variables set

``test_infer.py`` and ``anydev serve`` call :func:`follow_and_exit` themselves on the ranks other
than 0 when torchrun starts them.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import traceback

from .control_group import ControlGroup
from .group_errors import ControlLost, LaunchError, RankFailedError
from .launch import CONNECT_TIMEOUT_ENV, Launch, check_local_device, launch_from_env, seconds_from_env
from .store import connect_store
from .watchdog import Watchdog
from .abort import abort_communicators
from ..timeline import Timeline


def follow_and_exit(launch: Launch) -> None:
    """Run this rank until rank 0 ends the group, then end the process (never returns): exit code 0
    after a normal end, 1 when a rank failed, 2 for a bad launch. Ctrl-C is ignored here: it reaches
    every process of the group at once, and rank 0 ends the group (one line, from rank 0 alone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = follow(launch)
    except LaunchError as exc:
        print_error(str(exc))
        code = 2
    except BaseException as exc:  # a bug: its traceback, and the code that says so
        traceback.print_exc()
        print_error(f"rank {launch.rank}: {type(exc).__name__}: {exc}")
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # no waiting for a rank thread stuck in a collective with a dead peer


def follow(launch: Launch) -> int:
    """Serve rank 0's messages as rank ``launch.rank``; returns the exit code."""
    _die_with_parent()
    timeout = seconds_from_env(CONNECT_TIMEOUT_ENV, 120.0)
    control = ControlGroup(launch, connect_store(launch, timeout), timeout)
    rank: _Rank | None = None
    watchdog = Watchdog(launch, lambda: connect_store(launch, timeout), [0], _stop_now(launch, lambda: rank, control))
    try:
        while True:
            try:
                seq, wants_reply, target, kind, *rest = control.receive()
            except ControlLost as exc:
                if rank is None:
                    return 0   # rank 0 ended between engines: the run is over
                print_error(f"rank {launch.rank} stops: rank 0 is gone ({exc})")
                return 1
            if target is not None and target != launch.rank:
                continue
            if kind == "exit":
                return 0
            try:
                if kind == "setup":
                    rank = _Rank(launch, rest[0])
                    value = None
                elif kind == "close":
                    value, rank = rank.close() if rank is not None else None, None
                elif rank is None:   # its setup failed: nothing to run or free
                    value = {"value": [], "state": {}}
                else:
                    name, args, _ = rest
                    value = rank.call(name, args)
                ok = True
            except Exception as exc:
                ok, value = False, _portable(exc, launch.rank)
                if not wants_reply:   # a step failed: the others are waiting for this rank in a collective
                    control.report_failure(f"'{rest[0]}' raised {type(exc).__name__}: {exc}")
                    print_error(f"rank {launch.rank}: '{rest[0]}' raised {type(exc).__name__}: {exc}")
                    return 1
            if wants_reply:
                try:
                    control.reply(seq, (ok, value))
                except (TypeError, AttributeError, ValueError) as exc:   # a value that does not pickle
                    control.reply(seq, (False, RankFailedError(launch.rank, f"its reply does not pickle: {exc}")))
    finally:
        watchdog.stop()


def open_source(source):
    """The checkpoint of a rank plan's ``checkpoint``: a path, or the recipe of one built in code."""
    from ..loading.checkpoint import open_checkpoint

    if isinstance(source, tuple):
        build, args = source
        return build(*args)
    return open_checkpoint(source)


class _Rank:
    """This process's rank of one engine."""

    def __init__(self, launch: Launch, plan):
        from anydev.plugin_api import load_backend

        from ..rank.kernel_choice import select_kernels

        config = plan.config
        self.backend = backend = load_backend(config.device)
        check_local_device(launch, backend)
        self.checkpoint = open_source(plan.checkpoint)
        device = backend.device(launch.local_rank)
        self.comm, self.pipe_comm = plan.join_communicators(device, launch.rank)
        setup = plan.rank_setup(launch.rank, device, self.comm, self.checkpoint, select_kernels(backend, config.kernels),
                                self.pipe_comm)
        self.timeline = Timeline()
        self._sent = 0
        self.worker = plan.worker_class(setup, self.timeline, threading.Event())

    def call(self, name: str, args: tuple) -> dict:
        """Run ``name(*args)`` on the rank's thread; its result and what rank 0 keeps of the rank."""
        value = self.worker.submit(getattr(self.worker, name), *args).result()
        if name == "release":   # the errors met while releasing
            value = [_portable(e, self.worker.rank) for e in value]
        return {"value": value if name != "forward" else None, "state": self._state()}

    def _state(self) -> dict:
        offset = time.time() - time.perf_counter()   # records travel in wall-clock seconds
        records = self.timeline.records[self._sent:]
        self._sent += len(records)
        kv, weights = self.worker.kv, self.worker.weights
        return {"kv_layout": kv.layout if kv is not None else None, "kv_zero_device_ms": self.worker.kv_zero_device_ms,
                "weight_stats": weights.stats if weights is not None else None,
                "timeline": [(r.phase, r.start + offset, r.end + offset) for r in records]}

    def close(self) -> None:
        """Free what ``release`` did not: the rank's thread, the communicator, the checkpoint."""
        self.worker.shutdown()
        self.comm.close()
        if self.pipe_comm is not None:
            self.pipe_comm.close()
        self.checkpoint.close()


def _portable(exc: BaseException, rank: int) -> BaseException:
    """``exc`` if it survives pickling, else a RankFailedError carrying its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RankFailedError(rank, f"{type(exc).__name__}: {exc}")


def _stop_now(launch: Launch, current_rank, control: ControlGroup):
    """The watchdog's reaction to another rank's failure: record that this rank stops because of it,
    abort this rank's communicators (its thread may be blocked in a collective with the failed rank;
    contract 1.4, where the backend can), then end the process. ``current_rank()`` is this process's
    :class:`_Rank`, or None."""
    def stop(rank: int, reason: str) -> None:
        try:
            control.report_stopped(rank)
        except Exception:  # the store is gone with rank 0: nobody is left to name the rank to
            pass
        print_error(f"rank {launch.rank} stops: rank {rank} failed: {reason}")
        mine = current_rank()
        if mine is not None:
            for problem in abort_communicators((mine.comm, mine.pipe_comm)):
                print_error(f"rank {launch.rank}: while aborting its communicators: {type(problem).__name__}: {problem}")
        sys.stdout.flush()
        os._exit(1)

    return stop


def _die_with_parent() -> None:
    """Started by executor="mp": end with the parent process, even when it is killed."""
    parent = os.environ.get("ANYDEV_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # the parent ended before prctl
        os._exit(1)


def print_error(text: str) -> None:
    print(f"error: {text}", file=sys.stderr, flush=True)


def main() -> None:
    try:
        launch = launch_from_env()
    except LaunchError as exc:
        print_error(str(exc))
        sys.exit(2)
    if launch is None or launch.rank == 0:
        print_error("anydev.core.executors.rank_process runs a rank other than 0 of a group: set RANK >= 1 and the other "
                    "torchrun variables (executor='mp' does so)")
        sys.exit(2)
    follow_and_exit(launch)


if __name__ == "__main__":
    main()
