"""The engine loop: one thread runs :meth:`InferEngine.step` while requests are in flight, and hands
each request's new tokens to the asyncio handler that waits for them.

Handlers call :meth:`EngineLoop.submit` (from the event loop) and read the returned
:class:`RequestStream`; a handler that goes away (the client disconnected) calls :meth:`abort`, which
gives the request's KV blocks back at once.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from anydev.core import InferEngine, SamplingParams
from anydev.core.errors import EngineClosedError
from anydev.core.sequence import Sequence
from anydev.plugin_api.errors import AnydevError


class QueueFullError(AnydevError):
    """The waiting queue holds its maximum; the client should retry later (HTTP 429)."""


class EngineStoppedError(AnydevError):
    """The server is shutting down or its engine failed; no request can run (HTTP 503)."""


@dataclass
class Progress:
    """What a request has so far: ``num_tokens`` of ``seq.output``; ``finished`` once it is done;
    ``error`` when the engine failed it."""

    num_tokens: int
    finished: bool
    error: BaseException | None = None


@dataclass
class RequestStream:
    seq: Sequence
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    first_token_time: float | None = None
    last_token_time: float | None = None

    def push(self, progress: Progress) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, progress)

    async def updates(self):
        """Each :class:`Progress` until the request finishes (raises the engine's error, if any)."""
        while True:
            progress = await self.queue.get()
            if progress.error is not None:
                raise progress.error
            yield progress
            if progress.finished:
                return


class EngineLoop:
    """Drives ``engine`` on a background thread. ``metrics`` (optional) gets ``first_token(seconds)``,
    ``next_token(seconds)`` and ``finished(seq)`` calls from that thread. A request still running
    ``request_timeout`` seconds after it arrived ends with finish reason "timeout"."""

    def __init__(self, engine: InferEngine, max_waiting: int = 256, metrics=None,
                 request_timeout: float | None = None):
        self.engine = engine
        self.max_waiting = max_waiting
        self.request_timeout = request_timeout
        self.metrics = metrics
        self.failure: BaseException | None = None
        self._streams: dict[int, RequestStream] = {}
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="anydev-engine-loop", daemon=True)

    @property
    def healthy(self) -> bool:
        return self._thread.is_alive() and self.failure is None and not self._stopping

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    def start(self) -> None:
        self._thread.start()

    def submit(self, prompt_ids: list[int], sampling: SamplingParams) -> RequestStream:
        """Queue a request (call from the event loop). Raises :class:`QueueFullError` when
        ``max_waiting`` requests already wait, :class:`EngineStoppedError` while stopping."""
        if not self.healthy:
            raise EngineStoppedError("the server is shutting down" if self._stopping
                                     else f"the engine failed: {self.failure}")
        if len(self.engine.scheduler.waiting) >= self.max_waiting:
            raise QueueFullError(f"the waiting queue is full ({self.max_waiting} requests, --max-waiting)")
        with self._wake:
            seq = self.engine.add_request(prompt_ids, sampling)
            self._streams[id(seq)] = RequestStream(seq, asyncio.get_running_loop())
            self._wake.notify()
            return self._streams[id(seq)]

    def abort(self, stream: RequestStream) -> None:
        """End the request now (its blocks come back at once); safe after it finished."""
        with self._wake:
            self._streams.pop(id(stream.seq), None)
            if not stream.seq.is_finished:
                self.engine.abort(stream.seq)
                if self.metrics:
                    self.metrics.finished(stream.seq)

    def abort_all(self, reason: str = "the server is shutting down") -> int:
        """Refuse new requests from now on and end every request in flight: its handler gets an
        :class:`EngineStoppedError` saying ``reason``, its blocks come back. Returns how many it ended."""
        with self._wake:
            self._stopping = True
            streams, self._streams = list(self._streams.values()), {}
            for stream in streams:
                self.engine.abort(stream.seq)
                if self.metrics:
                    self.metrics.finished(stream.seq)
                stream.push(Progress(len(stream.seq.output), True, EngineStoppedError(reason)))
            self._wake.notify()
        return len(streams)

    def stop(self, timeout: float = 30.0) -> None:
        """Abort whatever still runs, stop the thread and wait for it (at most ``timeout`` s)."""
        self.abort_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # ---- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not self.engine.has_unfinished:
                    self._wake.wait()
                if self._stopping:
                    return
            try:
                advanced = self.engine.step()
            except EngineClosedError:
                return
            except Exception as exc:   # a device or engine failure: every request in flight gets it
                self._fail_all(exc)
                return
            now = time.monotonic()
            with self._wake:
                for seq in advanced:
                    stream = self._streams.get(id(seq))
                    if stream is None:
                        continue          # aborted meanwhile, or a generate() call's own request
                    self._observe(stream, now)
                    if seq.is_finished:
                        del self._streams[id(seq)]
                        if self.metrics:
                            self.metrics.finished(seq)
                    stream.push(Progress(len(seq.output), seq.is_finished))
                self._expire(now)

    def _expire(self, now: float) -> None:
        """End the requests past their deadline (called with the lock held)."""
        if self.request_timeout is None:
            return
        for key, stream in list(self._streams.items()):
            if now - stream.seq.arrival_time > self.request_timeout:
                del self._streams[key]
                self.engine.abort(stream.seq, "timeout")
                if self.metrics:
                    self.metrics.finished(stream.seq)
                stream.push(Progress(len(stream.seq.output), True))

    def _observe(self, stream: RequestStream, now: float) -> None:
        if self.metrics is None:
            return
        if stream.first_token_time is None:
            stream.first_token_time = now
            self.metrics.first_token(now - stream.seq.arrival_time)
        else:
            self.metrics.next_token(now - stream.last_token_time)
        stream.last_token_time = now

    def _fail_all(self, exc: BaseException) -> None:
        with self._wake:
            self.failure = exc
            streams, self._streams = list(self._streams.values()), {}
            for stream in streams:
                self.engine.abort(stream.seq)
                stream.push(Progress(len(stream.seq.output), True, exc))
