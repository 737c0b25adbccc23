"""What the engine holds for each rank of a process group: rank 0's own worker, and a proxy of every other process."""
from __future__ import annotations

import time
from concurrent.futures import Future
from types import SimpleNamespace

from ..timeline import PhaseRecord
from .futures import done, failed
from .rank_commands import CLEANUP, NO_REPLY


class LocalRank:
    """Rank 0's own RankWorker, as the engine sees it: its futures fail when another rank does."""

    def __init__(self, worker, ranks):
        self._worker = worker
        self._ranks = ranks

    def __getattr__(self, name):
        return getattr(self._worker, name)

    def submit(self, fn, *args) -> Future:
        name = fn.__name__
        if self._ranks.failure is not None and name not in CLEANUP:   # after a failure: only free rank 0
            return failed(self._ranks.failure)
        return self._ranks.local_call(name, self._worker.submit(fn, *args))


class _RemoteMethod:
    def __init__(self, name: str):
        self.__name__ = name


class RemoteRank:
    """Another rank's process, as the engine sees it (what the engine reads of a RankWorker)."""

    def __init__(self, rank: int, ranks, timeline):
        self.rank = rank
        self.kv = None
        self.weights = None
        self.kv_zero_device_ms = None
        self._ranks = ranks
        self._timeline = timeline

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _RemoteMethod(name)

    def submit(self, method, *args) -> Future:
        name = method.__name__
        if name in CLEANUP and self._ranks._failed.is_set():
            return done([])   # the process is gone or about to be: nothing of it to free from here
        try:
            future = self._ranks.remote_future(self.rank, name, args)
        except Exception as exc:
            return failed(exc)
        if name in NO_REPLY:   # a step: rank 0's own future (nothing comes back from this rank)
            return future
        outer = Future()
        future.add_done_callback(lambda done: self._unpack(done, outer))
        return outer

    def _unpack(self, done: Future, outer: Future) -> None:
        if done.exception() is not None:
            outer.set_exception(done.exception())
            return
        value = done.result()
        if isinstance(value, dict) and "state" in value:
            self._apply(value["state"])
            value = value["value"]
        outer.set_result(value)

    def _apply(self, state: dict) -> None:
        if state.get("kv_layout") is not None:
            self.kv = SimpleNamespace(layout=state["kv_layout"])
        self.kv_zero_device_ms = state.get("kv_zero_device_ms", self.kv_zero_device_ms)
        if state.get("weight_stats") is not None:
            self.weights = SimpleNamespace(stats=state["weight_stats"])
        offset = time.time() - time.perf_counter()   # records travel in wall-clock seconds
        with self._timeline._lock:
            self._timeline.records.extend(PhaseRecord(self.rank, phase, start - offset, end - offset)
                                          for phase, start, end in state.get("timeline", ()))

    def shutdown(self) -> None:
        """The process ends at the engine's close (``ProcessRanks.close``)."""

