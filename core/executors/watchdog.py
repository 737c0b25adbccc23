"""The watchdog: a thread that beats this rank's heart in the store and watches the other ranks'.

It makes a rank that dies, hangs or fails visible to the others within seconds.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from .group_errors import first_line
from .launch import Launch, seconds_from_env
from .store import failure_reports

#: Seconds without a heartbeat after which a rank counts as gone (hung, or its machine lost).
HEARTBEAT_TIMEOUT_ENV = "ANYDEV_DIST_HEARTBEAT_TIMEOUT"
HEARTBEAT_INTERVAL_S = 0.5


class Watchdog:
    """A thread that beats this rank's heart in the store and watches ``ranks``' hearts and failure
    reports; ``on_failure(rank, reason)`` is called once, for the first problem seen."""

    def __init__(self, launch: Launch, store_factory: Callable, ranks: list[int],
                 on_failure: Callable[[int, str], None], timeout_s: float | None = None):
        self.launch = launch
        self._store = store_factory()   # its own connection: the main thread's may block in a wait
        self._ranks = ranks
        self._on_failure = on_failure
        self._timeout_s = timeout_s or seconds_from_env(HEARTBEAT_TIMEOUT_ENV, 30.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"anydev-watchdog{launch.rank}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen = {r: (-1, time.monotonic()) for r in self._ranks}
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            try:
                self._store.add(f"heartbeat/{self.launch.rank}", 1)
                reports = failure_reports(self._store, self.launch.world_size)
                beats = {r: self._store.add(f"heartbeat/{r}", 0) for r in self._ranks}
            except Exception as exc:  # the store is gone: its host (rank 0 or torchrun's agent) is
                if not self._stop.is_set():
                    self._fail(0, f"the c10d store at {self.launch.store_address} is gone ({first_line(exc)}); "
                                  "rank 0's process (or its machine) ended")
                return
            others = {r: text for r, text in reports.items() if r != self.launch.rank}
            if others:
                rank = min(others)
                self._fail(rank, others[rank])
                return
            now = time.monotonic()
            for r, count in beats.items():
                last, since = seen[r]
                if count != last:
                    seen[r] = (count, now)
                elif now - since > self._timeout_s:
                    self._fail(r, f"no heartbeat for {self._timeout_s:g} s (the process hung or was stopped, or its "
                                  f"machine is unreachable; {HEARTBEAT_TIMEOUT_ENV} sets the wait)")
                    return

    def _fail(self, rank: int, reason: str) -> None:
        if not self._stop.is_set():
            self._on_failure(rank, reason)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
