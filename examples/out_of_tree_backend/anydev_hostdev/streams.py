"""Streams and events: each stream is an in-order queue drained by one worker thread.

Work enqueued on a stream runs on its worker in order; ``synchronize`` waits for what was enqueued
before the call. An error raised by enqueued work is kept ("sticky", as in CUDA) and raised by the
next ``synchronize`` or ``destroy`` of that stream, so asynchronous failures are never lost.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable


class Stream:
    def __init__(self, device: int, name: str):
        self.device = device
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Condition()
        self._enqueued = 0
        self._finished = 0
        self._error: BaseException | None = None
        self._inline = 0  # > 0 while a torch_stream() context is open: enqueue waits for the work
        self._worker = threading.Thread(target=self._run, name=name, daemon=True)
        self._worker.start()

    def enqueue(self, work: Callable[[], None]) -> None:
        """Run ``work`` after everything enqueued before it."""
        with self._done:
            self._enqueued += 1
            ticket = self._enqueued
        self._work.put(work)
        if self._inline:
            self._wait_for(ticket)

    def synchronize(self) -> None:
        """Block until the work enqueued so far has run; raise the first error it raised."""
        self.wait_idle()
        self._raise_sticky_error()

    def wait_idle(self) -> None:
        """Block until the work enqueued so far has run; leave any error for ``synchronize``."""
        with self._done:
            ticket = self._enqueued
        self._wait_for(ticket)

    def destroy(self) -> None:
        """Finish the enqueued work, stop the worker, raise an error the work left behind."""
        self._work.put(None)
        self._worker.join()
        self._raise_sticky_error()

    def begin_inline(self) -> None:
        """Until ``end_inline``, enqueued work runs before ``enqueue`` returns (torch runs inline too)."""
        self.synchronize()
        self._inline += 1

    def end_inline(self) -> None:
        self._inline -= 1

    def _wait_for(self, ticket: int) -> None:
        with self._done:
            self._done.wait_for(lambda: self._finished >= ticket)

    def _raise_sticky_error(self) -> None:
        with self._done:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            try:
                work()
            except BaseException as exc:  # kept and raised by the next synchronize(), not swallowed
                with self._done:
                    self._error = self._error or exc
            with self._done:
                self._finished += 1
                self._done.notify_all()


class Event:
    """A marker recorded into streams. Each record gets a number; the event is done when the last
    record has been reached by its stream."""

    def __init__(self, device: int, timing: bool):
        self.device = device
        self.timing = timing
        self._cond = threading.Condition()
        self._recorded = 0
        self._completed = 0
        self.completed_at: float | None = None  # time.perf_counter() of the last record's completion

    def record(self, stream: Stream) -> None:
        with self._cond:
            self._recorded += 1
            number = self._recorded
            self.completed_at = None
        stream.enqueue(lambda: self._complete(number))

    def _complete(self, number: int) -> None:
        with self._cond:
            if number >= self._completed:
                self._completed = number
                if number == self._recorded:
                    self.completed_at = time.perf_counter()
            self._cond.notify_all()

    def last_record(self) -> int:
        with self._cond:
            return self._recorded

    def is_done(self) -> bool:
        with self._cond:
            return self._completed >= self._recorded

    def wait(self, number: int | None = None) -> None:
        """Block until record ``number`` (default: the last one) has completed."""
        with self._cond:
            target = self._recorded if number is None else number
            self._cond.wait_for(lambda: self._completed >= target)

    def was_recorded(self) -> bool:
        with self._cond:
            return self._recorded > 0
