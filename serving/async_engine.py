"""A client of the engine core for asyncio: what the HTTP server uses, and what a Python program can
use to drive the engine the same way::

    engine = await AsyncEngine.launch(model=None, config=EngineConfig())   # a core process of its own
    stream = await engine.add_request(prompt_ids, SamplingParams(max_new_tokens=32))
    async for progress in stream.updates():
        print(stream.output[:progress.num_tokens])
    await engine.close()

``launch`` spawns the core (multiprocessing's spawn), so a script that calls it needs the usual
``if __name__ == "__main__":`` guard. ``AsyncEngine.over(engine)`` does the same over an
:class:`InferEngine` this process already has (the core then runs on a thread). A request given an
:class:`~anydev.core.output.OutputText` has its text made as its tokens arrive, stop strings found
in it (the core stops on tokens only); streaming is the caller's.

Liveness: the core's heartbeat (serving/engine_core.py) says its step loop runs. While the core has
work, a silence of :data:`HEALTH_SILENCE_S` makes the client unhealthy (``/health``: 503) and one of
``stall_timeout`` seconds ends the requests in flight with :class:`EngineStalledError` (503); an idle
core's silence counts only once work arrives, and a core heard again is healthy again.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import time
from dataclasses import dataclass, field

import zmq
import zmq.asyncio

from anydev.core import SamplingParams
from anydev.core.output import OutputText
from anydev.plugin_api.errors import AnydevError

from .engine_core import HEARTBEAT_S, CoreLink, EngineCoreProcess, EngineCoreThread, client_identity
from .messages import (ENCODER, FROM_CORE, AbortRequests, AddRequest, EngineFailure, EngineInfo, EngineOutputs,
                       EngineStats, Shutdown)


class QueueFullError(AnydevError):
    """The waiting queue holds its maximum; the client should retry later (HTTP 429)."""


class InvalidRequestError(AnydevError):
    """The engine cannot run this request as asked (HTTP 400); the message says why."""


class FailedRequestError(AnydevError):
    """The request failed while it ran (its sampling failed); the engine serves on (HTTP 500)."""


class EngineStoppedError(AnydevError):
    """The server is shutting down or its engine failed; no request can run (HTTP 503)."""


class EngineStalledError(EngineStoppedError):
    """The engine core has work but has not been heard from for longer than the stall timeout
    (stopped, deadlocked, stuck in a device call); the request is ended (HTTP 503)."""


#: A core with work that is silent this long (seconds) makes the client unhealthy (at most the stall timeout).
HEALTH_SILENCE_S = 5.0
#: The default stall timeout (seconds): requests in flight end with EngineStalledError after this much silence.
DEFAULT_STALL_TIMEOUT = 60.0


@dataclass
class Progress:
    """``num_tokens`` of the request's output are in; ``finished`` once it is done."""

    num_tokens: int
    finished: bool


@dataclass(eq=False)
class RequestStream:
    """One request as it runs: ``output`` grows as the core's batches arrive; ``finish_reason`` is
    set once it is done ("eos", "length", "stop", "abort", "timeout", "error": then ``error`` says why)."""

    request_id: str
    prompt: list[int]
    sampling: SamplingParams
    output: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: BaseException | None = None
    admitted: bool = False
    arrival_time: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    last_token_time: float | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _admitted: asyncio.Future | None = None
    #: The output as text (an :class:`~anydev.core.output.OutputText`), when the request was given one.
    text: OutputText | None = None
    #: With ``sampling.logprobs``: a :class:`~anydev.core.sched.logprobs.TokenLogprobs` per output token.
    logprobs: list = field(default_factory=list)
    #: With ``sampling.prompt_logprobs``: one per prompt token after the first (with the first tokens).
    prompt_logprobs: list = field(default_factory=list)
    _steps: collections.deque = field(default_factory=collections.deque)   # output length after each step

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None or self.error is not None

    @property
    def waits(self) -> bool:
        """Whether :meth:`updates` would wait for the core now: no step it has not yielded, not ended."""
        return not self._steps and not self.is_finished

    async def first_token(self) -> None:
        """Wait until the request has a token (its prompt is computed) or has ended."""
        while not self.output and not self.is_finished:
            self._wake.clear()
            await self._wake.wait()
        if self.error is not None:
            raise self.error

    async def updates(self):
        """A :class:`Progress` for each step that gave the request tokens, the last one
        ``finished``; raises :class:`EngineStoppedError` when the engine failed or the server
        stopped meanwhile, :class:`FailedRequestError` when this request failed."""
        while True:
            if self.error is not None:
                raise self.error
            if self._steps:
                count = min(self._steps.popleft(), len(self.output))    # (a stop string may have cut it)
                done = self.finish_reason is not None and not self._steps
                yield Progress(count, done)
                if done:
                    return
            elif self.finish_reason is not None:
                yield Progress(len(self.output), True)
                return
            else:
                self._wake.clear()
                await self._wake.wait()


class AsyncEngine:
    """The client side of one engine core. ``observer`` (optional) is told ``first_token(seconds)``,
    ``next_token(seconds)`` and ``finished(stream)`` as requests run; ``on_failure`` callbacks run
    once when the core fails or dies; ``on_stall`` callbacks run with ``(True, seconds)`` when a core
    with work has been silent for the health limit, and ``(False, seconds)`` when it is heard again."""

    def __init__(self, link: CoreLink, client_index: int = 0, observer=None, owner=None,
                 stall_timeout: float = DEFAULT_STALL_TIMEOUT):
        self.link, self.info = link, link.info
        self.client_index = client_index
        self.observer = observer
        self.stats = EngineStats(kv_blocks_total=link.info.num_blocks)
        self.failure: str | None = None
        self.on_failure: list = []
        self.on_stall: list = []
        self.stall_timeout = stall_timeout
        self.last_heard = time.monotonic()
        self._stalled_heard: float | None = None   # last_heard when a stall was declared (None: none)
        self._watchdog: asyncio.Task | None = None
        self._owner = owner               # the core this client started (launch/over), stopped at close
        self._lifeline_to_core = None     # launch: the write end the core watches, held while this client lives
        self._streams: dict[str, RequestStream] = {}
        self._ids = itertools.count()
        self._stopping = False
        self._socket = None
        self._receiver: asyncio.Task | None = None

    # ---- starting and stopping -------------------------------------------------------------------
    @classmethod
    async def launch(cls, model: str | None, config, observer=None) -> "AsyncEngine":
        """Start an engine core process for ``model`` (a path; None: the demo model) and connect."""
        core = EngineCoreProcess(model, config)
        await asyncio.get_running_loop().run_in_executor(None, core.start)
        client = cls(core.link(), observer=observer, owner=core)
        client._lifeline_to_core = core.client_lifeline(0)      # held while this client lives
        await client.connect()
        return client

    @classmethod
    async def over(cls, engine, observer=None) -> "AsyncEngine":
        """A core on a thread of this process over ``engine`` (the caller closes the engine)."""
        client = cls.unstarted_over(engine, observer)
        await client.connect()
        return client

    @classmethod
    def unstarted_over(cls, engine, observer=None) -> "AsyncEngine":
        """As :meth:`over`, connected later by :meth:`connect` (an app's lifespan does it)."""
        core = EngineCoreThread(engine)      # its address and lifeline come with connect()
        return cls(CoreLink("", _thread_info(engine), None), observer=observer, owner=core)

    async def connect(self) -> None:
        """Start the core if this client owns an unstarted thread core, then connect to it."""
        if isinstance(self._owner, EngineCoreThread):
            self.link = self._owner.start()
        socket = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        socket.setsockopt(zmq.IDENTITY, client_identity(self.client_index))
        socket.setsockopt(zmq.SNDHWM, 0)
        socket.setsockopt(zmq.RCVHWM, 0)
        socket.setsockopt(zmq.LINGER, 1000)
        socket.connect(self.link.address)
        self._socket = socket
        loop = asyncio.get_running_loop()
        loop.add_reader(self.link.lifeline_fd(), self._core_gone)
        self._receiver = loop.create_task(self._receive())
        self.last_heard = time.monotonic()
        self._watchdog = loop.create_task(self._watch())

    @property
    def healthy(self) -> bool:
        return self._serving and not self.stalled

    @property
    def _serving(self) -> bool:
        return self._socket is not None and self.failure is None and not self._stopping

    @property
    def has_work(self) -> bool:
        """Requests of this client in flight, or the core's last counters show some (any client's)."""
        return bool(self._streams) or self.stats.running + self.stats.waiting > 0

    def silence(self) -> float:
        """Seconds the core has been silent while it has work (0 while idle, or while its messages
        wait unread: then it is this process that is slow)."""
        if not self.has_work or self._socket is None or self._socket.get(zmq.EVENTS) & zmq.POLLIN:
            return 0.0
        return time.monotonic() - self.last_heard

    @property
    def stalled(self) -> bool:
        """The core has work and has been silent for the health limit (or the stall timeout, when
        shorter); once declared, a stall lasts until the core is heard again."""
        return self._stalled_heard is not None or self.silence() > min(HEALTH_SILENCE_S, self.stall_timeout)

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    async def close(self, timeout: float = 30.0) -> None:
        """Abort what still runs, say goodbye to the core and disconnect; a core this client
        started is waited for (``timeout`` s) and then killed."""
        self.abort_all()
        if self._socket is not None:
            asyncio.get_running_loop().remove_reader(self.link.lifeline_fd())
            if self.failure is None:
                await self._socket.send(ENCODER.encode(Shutdown()))
            self._receiver.cancel()
            self._watchdog.cancel()
            self._socket.close()
            self._socket = None
        if self._owner is not None:
            owner, self._owner = self._owner, None
            await asyncio.get_running_loop().run_in_executor(None, _stop_owner, owner, timeout)
        if self._lifeline_to_core is not None:
            self._lifeline_to_core.close()
            self._lifeline_to_core = None

    # ---- requests ------------------------------------------------------------------------------
    async def add_request(self, prompt_ids: list[int], sampling: SamplingParams, max_waiting: int | None = None,
                          timeout: float | None = None, text: OutputText | None = None) -> RequestStream:
        """Send a request and wait until the core has queued it. Raises :class:`QueueFullError`
        (``max_waiting`` requests already wait), :class:`InvalidRequestError` (the engine refused
        it), :class:`EngineStoppedError` (stopping, or the core failed). ``timeout``: the core ends
        it with finish reason "timeout" after that many seconds. ``text``: takes every output token
        as it arrives (its stop strings are ``sampling.stop``); once it finds a stop string the
        output ends with that token and the request with finish reason "stop"."""
        if not self._serving:
            raise EngineStoppedError(self._why_stopped())
        if self.silence() > self.stall_timeout:
            raise EngineStalledError(self._stall_message(self.silence()))
        stream = RequestStream(str(next(self._ids)), list(prompt_ids), sampling, text=text)
        stream._admitted = asyncio.get_running_loop().create_future()
        self._streams[stream.request_id] = stream
        # Stop strings are matched on the text, here; the core stops on tokens only.
        core_sampling = dataclasses.replace(sampling, stop=[]) if sampling.stop else sampling
        self._send(AddRequest(stream.request_id, stream.prompt, core_sampling, max_waiting, timeout))
        try:
            await stream._admitted
        except asyncio.CancelledError:
            self.abort(stream)
            raise
        return stream

    def abort(self, stream: RequestStream, reason: str = "abort") -> None:
        """End the request now with ``reason`` (its blocks come back in the core); a no-op once it
        finished."""
        if self._streams.pop(stream.request_id, None) is None:
            return
        stream.finish_reason = reason
        if stream.text is not None:
            stream.text.finish()
        if self._socket is not None and self.failure is None:
            self._send(AbortRequests([stream.request_id], reason))
        if self.observer and stream.admitted:
            self.observer.finished(stream)
        stream._wake.set()

    def abort_all(self, reason: str = "the server is shutting down") -> int:
        """Refuse new requests from now on and end every request in flight: each reader gets an
        :class:`EngineStoppedError` saying ``reason``. Returns how many it ended."""
        self._stopping = True
        streams = list(self._streams.values())
        for stream in streams:
            self.abort(stream)
            self._end(stream, EngineStoppedError(reason))
        return len(streams)

    def _send(self, message) -> None:
        self._socket.send(ENCODER.encode(message))   # never waits: unbounded queue

    # ---- what comes back -------------------------------------------------------------------------
    async def _receive(self) -> None:
        while True:
            payload = await self._socket.recv()
            self.last_heard = time.monotonic()
            if self._stalled_heard is not None:      # heard again after a stall
                self._report_stall(False, self.last_heard - self._stalled_heard)
                self._stalled_heard = None
            message = FROM_CORE.decode(payload)
            if isinstance(message, EngineFailure):
                self._fail(f"the engine core failed: {message.message}")
                return
            self._take(message)

    def _take(self, batch: EngineOutputs) -> None:
        self.stats = batch.stats              # first: a finished request's blocks are back in these
        now = time.monotonic()
        streams = self._streams
        for request_id, token in zip(batch.plain_ids, batch.plain_tokens):
            stream = streams.get(request_id)
            if stream is None:
                continue
            if not stream._admitted.done():   # its admission may follow in this batch's outputs
                self._admit(stream)
            if self._step_tokens(stream, (token,), now):
                self.abort(stream, "stop")
            else:
                stream._wake.set()
        for out in batch.outputs:
            stream = streams.get(out.request_id)
            if stream is None:
                continue
            if not stream._admitted.done():
                if out.error is not None:
                    del self._streams[out.request_id]
                    kind = QueueFullError if out.error_kind == "queue_full" else InvalidRequestError
                    stream._admitted.set_exception(kind(out.error))
                    continue
                self._admit(stream)
            if out.new_token_ids:
                stopped = self._step_tokens(stream, out.new_token_ids, now)
                if out.prompt_logprobs is not None:
                    stream.prompt_logprobs = out.prompt_logprobs
                if out.new_logprobs:
                    stream.logprobs += out.new_logprobs[:len(stream.output) - len(stream.logprobs)]
                if stopped:
                    self.abort(stream, "stop")
                    continue
            if out.finish_reason is not None or out.error is not None:
                del self._streams[out.request_id]
                stream.finish_reason = out.finish_reason or "error"
                if stream.text is not None:
                    stream.text.finish()
                if out.error is not None:
                    stream.error = FailedRequestError(out.error)
                if self.observer:
                    self.observer.finished(stream)
            stream._wake.set()

    def _step_tokens(self, stream: RequestStream, tokens, now: float) -> bool:
        """A step's ``tokens`` into the stream's output (:meth:`_add_tokens`), the step marked and
        timed; True when a stop string ends the request."""
        stopped = self._add_tokens(stream, tokens)
        stream._steps.append(len(stream.output))
        self._observe(stream, now)
        return stopped

    @staticmethod
    def _admit(stream: RequestStream) -> None:
        stream._admitted.set_result(None)
        stream.admitted = True

    @staticmethod
    def _add_tokens(stream: RequestStream, tokens) -> bool:
        """Append ``tokens`` to the output (through its text, if any); True when a stop string ends
        it (the tokens after the one that completed it are dropped)."""
        if stream.text is None:
            stream.output += tokens
            return False
        for token in tokens:
            stream.output.append(token)
            if stream.text.add(token):
                return True
        return False

    def _observe(self, stream: RequestStream, now: float) -> None:
        if self.observer is not None:
            if stream.first_token_time is None:
                self.observer.first_token(now - stream.arrival_time)
            else:
                self.observer.next_token(now - stream.last_token_time)
        if stream.first_token_time is None:
            stream.first_token_time = now
        stream.last_token_time = now

    async def _watch(self) -> None:
        """Judge the core's silence every heartbeat: report a stall (its end is reported as the core
        is heard again), and end the requests in flight once the silence passes the stall timeout."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if self.failure is not None:
                return
            silent = self.silence()
            if self._stalled_heard is None and silent > min(HEALTH_SILENCE_S, self.stall_timeout):
                self._stalled_heard = self.last_heard
                self._report_stall(True, silent)
            if silent > self.stall_timeout and self._streams:
                error = EngineStalledError(self._stall_message(silent))
                for stream in list(self._streams.values()):
                    self.abort(stream)           # the core drops them once it runs again
                    self._end(stream, error)

    def _report_stall(self, stalled: bool, seconds: float) -> None:
        for callback in self.on_stall:
            callback(stalled, seconds)

    def _stall_message(self, silent: float) -> str:
        return (f"the engine core has not stepped for {silent:.1f} s while it has work (stopped, deadlocked or stuck "
                f"in a device call); requests wait for it at most {self.stall_timeout:g} s (--engine-stall-timeout)")

    def _core_gone(self) -> None:
        """The lifeline ended: the core is gone. What it sent before going is read first."""
        asyncio.get_running_loop().remove_reader(self.link.lifeline_fd())
        describe = self.link.describe_exit

        async def after_the_last_messages():
            await asyncio.sleep(0.1)
            self._fail(describe() if describe else "the engine core exited")

        asyncio.get_running_loop().create_task(after_the_last_messages())

    def _fail(self, reason: str) -> None:
        if self.failure is not None:
            return
        self.failure = reason
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            self._end(stream, EngineStoppedError(f"the engine failed: {reason}"))
        for callback in self.on_failure:
            callback(reason)

    @staticmethod
    def _end(stream: RequestStream, error: BaseException) -> None:
        stream.error = error
        if not stream._admitted.done():
            stream._admitted.set_exception(error)
        stream._wake.set()

    def _why_stopped(self) -> str:
        if self.failure is not None:
            return f"the engine failed: {self.failure}"
        return "the server is shutting down" if self._stopping else "the engine is not connected"


def _thread_info(engine) -> EngineInfo:
    from .engine_core import engine_info

    return engine_info(engine)


def _stop_owner(owner, timeout: float) -> None:
    if isinstance(owner, EngineCoreThread):
        owner.join(timeout)
    else:
        owner.stop(timeout)
