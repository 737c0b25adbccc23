"""Streams and events of the cpu runtime.

A stream is a worker thread running its queue of operations in order. An operation that raises makes
the stream *failed*, as a sticky CUDA error does: later operations are skipped (event markers still
complete, carrying the error) and every later ``synchronize`` raises the error again.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

from ...plugin_api.errors import AnydevError
from .errors import LAUNCH_FAILURE, call_error


class CpuEvent:
    """An event. Each ``record`` starts a new generation; the recording stream completes it later.

    The event is done when its latest generation has completed (or it was never recorded), as CUDA
    events reflect only their last record.
    """

    def __init__(self, device: int, timing: bool):
        self.device = device
        self.timing = timing
        self._cond = threading.Condition()
        self.generation = 0  # of the latest record; 0 = never recorded
        self._pending: set[int] = set()
        self._failed: dict[int, AnydevError] = {}  # generation -> error of the stream that recorded it
        self.completed_at: float | None = None  # perf_counter() when the latest generation completed

    def start_record(self) -> int:
        with self._cond:
            self.generation += 1
            self._pending.add(self.generation)
            self.completed_at = None
            return self.generation

    def complete(self, generation: int, error: AnydevError | None) -> None:
        """Called by the recording stream's worker when it reaches the record."""
        with self._cond:
            self._pending.discard(generation)
            if error is not None:
                self._failed[generation] = error
            if generation == self.generation:
                self.completed_at = time.perf_counter()
            self._cond.notify_all()

    def is_done(self) -> bool:
        """True when the latest record has completed; raises the recording stream's error if it failed."""
        with self._cond:
            if self.generation in self._pending:
                return False
        self._raise_failure(self.generation)
        return True

    def wait(self, generation: int | None = None) -> None:
        """Block until ``generation`` (default: the latest) has completed; raise its stream's error."""
        with self._cond:
            generation = self.generation if generation is None else generation
            self._cond.wait_for(lambda: generation not in self._pending)
        self._raise_failure(generation)

    def _raise_failure(self, generation: int) -> None:
        error = self._failed.get(generation)
        if error is not None:
            raise error


class StreamWorker:
    """One stream: a daemon thread that runs enqueued operations in order."""

    def __init__(self, handle: int, device: int):
        self.handle = handle
        self.device = device
        self.error: AnydevError | None = None
        self._error_reported = False
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, Callable[[], None], bool]] = deque()
        self._num_enqueued = 0
        self._num_finished = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"anydev-cpu-stream-{handle}", daemon=True)
        self._thread.start()

    def enqueue(self, call: str, operation: Callable[[], None], runs_after_failure: bool = False) -> None:
        """Append ``operation`` (named ``call`` in errors) to the queue and return at once."""
        with self._cond:
            self._queue.append((call, operation, runs_after_failure))
            self._num_enqueued += 1
            self._cond.notify_all()

    def enqueue_record(self, event: CpuEvent) -> None:
        generation = event.start_record()
        self.enqueue("event_record", lambda: event.complete(generation, self.error), runs_after_failure=True)

    def enqueue_wait(self, event: CpuEvent) -> None:
        """Later work waits for the event's latest record as of now; a failed record fails this stream."""
        generation = event.generation
        if generation:
            self.enqueue("stream_wait_event", lambda: event.wait(generation))

    def wait_idle(self) -> None:
        """Block until everything enqueued so far has run (or been skipped after a failure)."""
        with self._cond:
            target = self._num_enqueued
            self._cond.wait_for(lambda: self._num_finished >= target)

    def raise_error(self) -> None:
        """Raise the sticky error, if the stream has failed."""
        if self.error is not None:
            self._error_reported = True
            raise self.error

    def synchronize(self) -> None:
        self.wait_idle()
        self.raise_error()

    def stop(self) -> AnydevError | None:
        """Let queued work finish, end the thread; return the error nobody has seen yet, if any."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        return None if self._error_reported else self.error

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if not self._queue:
                    return
                call, operation, runs_after_failure = self._queue.popleft()
            if self.error is None or runs_after_failure:
                self._execute(call, operation)
            with self._cond:
                self._num_finished += 1
                self._cond.notify_all()

    def _execute(self, call: str, operation: Callable[[], None]) -> None:
        try:
            operation()
        except AnydevError as exc:
            self.error = exc
        except Exception as exc:  # a bug or a torch error inside an operation: keep it, typed, for synchronize
            error = call_error(call, LAUNCH_FAILURE, f"{type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self.error = error
