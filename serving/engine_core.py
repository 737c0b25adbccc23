"""The engine core: an :class:`InferEngine`'s scheduler, executor and step loop, fed over ZMQ.

Front ends (the HTTP processes, or any :class:`~anydev.serving.async_engine.AsyncEngine`) send
requests and aborts to one ROUTER socket; after each step the core sends each front end one
:class:`EngineOutputs` batch with its requests' new token ids and finish reasons. Sends never wait:
the socket's queues are unbounded, so a slow front end only delays itself, never the steps.

The core runs in a process of its own (:class:`EngineCoreProcess`, what ``anydev serve`` starts) or
on a thread (:class:`EngineCoreThread`, over an engine the caller made). Either way it has a
*lifeline*: a pipe whose write end it holds until it ends, so that a front end sees it go (killed,
crashed) at once as end-of-file on the read end. Each front end of a process core has a lifeline of
its own the other way: when one dies, the core aborts that front end's requests and serves on.

Each front end also hears from the core at least every :data:`HEARTBEAT_S` seconds (an
:class:`EngineOutputs` batch, empty when there is no news), busy or idle, from the loop that steps:
a core that is alive but does not step (stopped, deadlocked, stuck in a device call) goes silent,
and the front end judges that silence against the work it knows of (``AsyncEngine.stalled``).
"""
from __future__ import annotations


import heapq
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import msgspec
import zmq

from anydev.core.errors import EngineConfigError
from anydev.plugin_api.errors import AnydevError

from .messages import (ENCODER, TO_CORE, AbortRequests, AddRequest, EngineFailure, EngineInfo, EngineOutputs,
                       EngineStats, RequestOutput, Shutdown, TokenizerSpec)

if TYPE_CHECKING:   # the engine (torch) is imported by the core's process only, not by the front ends
    from anydev.core import EngineConfig, InferEngine
    from anydev.core.loading.tokenizer import Tokenizer
    from anydev.core.sched.sequence import Sequence

#: Every front end hears from the core at least this often (seconds), from the step loop itself.
HEARTBEAT_S = 0.5
#: How often an idle core wakes (to send its heartbeat; every event wakes it at once).
_IDLE_POLL_MS = int(HEARTBEAT_S * 1000)
#: Counters go to a front end with no news at most this often while the engine is busy.
_STATS_EVERY_S = 0.1


class EngineCoreError(AnydevError):
    """The engine core could not start, or it died; the message says why."""


def client_identity(index: int) -> bytes:
    return b"frontend-%d" % index


@dataclass
class _Tracked:
    client: bytes
    request_id: str
    seq: Sequence
    deadline: float | None
    sent: int = 0           # tokens already sent to the client
    #: where it asks for no logprobs: its client's plain tokens (EngineOutputs.plain_ids, .plain_tokens)
    plain: tuple[list[str], list[int]] | None = None


@dataclass
class EngineCore:
    """The loop. ``clients`` are the identities it serves (it ends once each has sent
    :class:`Shutdown` or lost its lifeline); ``lifelines`` maps some of them to the read end of their
    lifeline pipe."""

    engine: InferEngine
    address: str
    clients: set[bytes]
    lifelines: dict[bytes, object] = field(default_factory=dict)
    _requests: dict[tuple[bytes, str], _Tracked] = field(default_factory=dict)
    _by_seq: dict[int, _Tracked] = field(default_factory=dict)
    _pending: dict[bytes, list[RequestOutput]] = field(default_factory=dict)
    #: per client, the plain tokens since its last batch: (request ids, tokens), emptied as they go
    _plain: dict[bytes, tuple[list[str], list[int]]] = field(default_factory=dict)
    _stats_sent: dict[bytes, float] = field(default_factory=dict)
    #: (deadline, request key) of the requests with a deadline, earliest first (some may have ended)
    _deadlines: list[tuple[float, tuple[bytes, str]]] = field(default_factory=list)

    def run(self) -> None:
        """Serve until every client is gone. A step that raises is sent to every client as an
        :class:`EngineFailure`, then re-raised."""
        context = zmq.Context.instance()
        self._socket = context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.SNDHWM, 0)      # never drop, never wait: a slow client only queues
        self._socket.setsockopt(zmq.RCVHWM, 0)
        self._socket.setsockopt(zmq.LINGER, 2000)
        self._socket.bind(self.address)
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        watched = {lifeline.fileno(): identity for identity, lifeline in self.lifelines.items()}
        for fd in watched:
            poller.register(fd, zmq.POLLIN | zmq.POLLERR)   # a pipe's end reads as POLLHUP: POLLERR here
        try:
            while self.clients:
                busy = self.engine.has_unfinished
                events = dict(poller.poll(0 if busy else _IDLE_POLL_MS))
                if self._socket in events:
                    self._receive()
                for fd, identity in list(watched.items()):
                    if fd in events:                 # (the poller names a plain file by its number)
                        poller.unregister(fd)
                        del watched[fd]
                        if identity in self.clients:
                            print(f"anydev engine core: {identity.decode()} exited; its requests are aborted",
                                  file=sys.stderr, flush=True)
                            self._drop_client(identity)
                if self.engine.has_unfinished:
                    try:
                        self._collect(self.engine.step())
                    except Exception as exc:
                        self._broadcast_failure(f"{type(exc).__name__}: {exc}")
                        raise
                elif self.engine.pending_graphs and not events:
                    self.engine.capture_next_graph()   # idle: a bucket start-up left out (lazy_graphs)
                self._expire(time.monotonic())
                self._flush(events_seen=bool(events) or busy)
        finally:
            self._socket.close()

    # ---- inputs ------------------------------------------------------------------------------
    def _receive(self) -> None:
        while True:
            try:
                identity, payload = self._socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            message = TO_CORE.decode(payload)
            if identity not in self.clients:
                continue                      # a client that said goodbye (or an unknown one)
            if isinstance(message, AddRequest):
                self._add(identity, message)
            elif isinstance(message, AbortRequests):
                for request_id in message.request_ids:
                    tracked = self._requests.get((identity, request_id))
                    if tracked is not None:
                        self._finish(tracked, message.reason, notify=False)
            elif isinstance(message, Shutdown):
                self._drop_client(identity)

    def _add(self, client: bytes, message: AddRequest) -> None:
        out = self._pending.setdefault(client, [])
        if message.max_waiting is not None and self.engine.stats().waiting >= message.max_waiting:
            out.append(RequestOutput(message.request_id, [], error=f"the waiting queue is full ({message.max_waiting} "
                                     "requests, --max-waiting)", error_kind="queue_full"))
            return
        try:
            seq = self.engine.add_request(message.prompt_ids, message.sampling)
        except EngineConfigError as exc:
            out.append(RequestOutput(message.request_id, [], error=str(exc), error_kind="invalid"))
            return
        deadline = None if message.timeout is None else seq.arrival_time + message.timeout
        sampling = message.sampling
        plain = self._plain.setdefault(client, ([], [])) \
            if sampling.logprobs is None and sampling.prompt_logprobs is None else None
        tracked = _Tracked(client, message.request_id, seq, deadline, plain=plain)
        self._requests[(client, message.request_id)] = tracked
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, (client, message.request_id)))
        self._by_seq[seq.seq_id] = tracked
        out.append(RequestOutput(message.request_id, []))        # admitted

    def _drop_client(self, client: bytes) -> None:
        self.clients.discard(client)
        self._pending.pop(client, None)
        self._plain.pop(client, None)
        for tracked in [t for t in self._requests.values() if t.client == client]:
            self._finish(tracked, "abort", notify=False)

    # ---- outputs -----------------------------------------------------------------------------
    def _collect(self, advanced: list[Sequence]) -> None:
        by_seq, pending = self._by_seq, self._pending
        for seq in advanced:
            tracked = by_seq.get(seq.seq_id)
            if tracked is None:
                continue                      # aborted meanwhile, or a generate() call's own request
            tokens = seq.output
            sent, tracked.sent = tracked.sent, len(tokens)
            plain = tracked.plain
            if plain is not None and tracked.sent == sent + 1 and not seq.is_finished:   # most of a step's news
                plain[0].append(tracked.request_id)
                plain[1].append(tokens[-1])
                continue
            new = tokens[sent:]
            sampling = seq.sampling
            if not seq.is_finished and sampling.logprobs is None and (sent or sampling.prompt_logprobs is None):
                output = RequestOutput(tracked.request_id, new)
            else:
                output = self._output(tracked, seq, new, sent)
            out = pending.get(tracked.client)
            if out is None:
                out = pending[tracked.client] = []
            out.append(output)

    def _output(self, tracked: _Tracked, seq: Sequence, new: list[int], sent: int) -> RequestOutput:
        """The output of ``seq``'s ``new`` tokens (``sent`` went before them) when it finished or asks for logprobs."""
        reason = seq.finish_reason if seq.is_finished else None
        if reason is not None:
            self._forget(tracked)
        if reason == "error":
            return RequestOutput(tracked.request_id, new, error=seq.error, error_kind="failed")
        scored = seq.prompt_logprobs if sent == 0 and seq.sampling.prompt_logprobs is not None else None
        return RequestOutput(tracked.request_id, new, reason, new_logprobs=_new_logprobs(seq, sent), prompt_logprobs=scored)

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] < now:
            deadline, key = heapq.heappop(self._deadlines)
            tracked = self._requests.get(key)
            if tracked is not None and tracked.deadline == deadline:    # not a later request of the same id
                self._finish(tracked, "timeout", notify=True)

    def _finish(self, tracked: _Tracked, reason: str, notify: bool) -> None:
        self.engine.abort(tracked.seq, reason)
        self._forget(tracked)
        if notify:
            new = tracked.seq.output[tracked.sent:]
            self._pending.setdefault(tracked.client, []).append(
                RequestOutput(tracked.request_id, new, reason, new_logprobs=_new_logprobs(tracked.seq, tracked.sent)))

    def _forget(self, tracked: _Tracked) -> None:
        self._requests.pop((tracked.client, tracked.request_id), None)
        self._by_seq.pop(tracked.seq.seq_id, None)

    def _flush(self, events_seen: bool) -> None:
        """Send each client its outputs; a client with none gets the counters now and then (and
        whenever the engine goes idle), so that its gauges follow, and at least every
        :data:`HEARTBEAT_S` (the heartbeat)."""
        now = time.monotonic()
        heartbeat_due = any(now - self._stats_sent.get(client, 0.0) >= HEARTBEAT_S for client in self.clients)
        if not events_seen and not self._pending and not any(ids for ids, _ in self._plain.values()) \
                and not heartbeat_due:
            return
        idle = not self.engine.has_unfinished
        stats = self.stats()
        for client in self.clients:
            outputs = self._pending.pop(client, None)
            ids, tokens = self._plain.get(client, _NO_PLAIN)
            since = now - self._stats_sent.get(client, 0.0)
            if outputs is None and not ids and since < HEARTBEAT_S and (
                    not events_seen or (not idle and since < _STATS_EVERY_S)):
                continue
            self._socket.send(client, zmq.SNDMORE)
            self._socket.send(ENCODER.encode(EngineOutputs(outputs or [], stats, ids, tokens)))
            ids.clear()
            tokens.clear()
            self._stats_sent[client] = now
        self._pending.clear()

    def _broadcast_failure(self, message: str) -> None:
        for client in self.clients:
            self._socket.send_multipart([client, ENCODER.encode(EngineFailure(message))])

    def stats(self) -> EngineStats:
        return EngineStats(**vars(self.engine.stats()))   # the wire copy: same fields, same names


_NO_PLAIN: tuple[list[str], list[int]] = ([], [])     # a client with no plain requests yet (stays empty)


def _new_logprobs(seq: Sequence, sent: int):
    """The logprobs of ``seq``'s tokens from ``sent`` on, when its request asks for them."""
    return seq.logprobs[sent:] if seq.sampling.logprobs is not None else None


def engine_info(engine: InferEngine, tokenizer: TokenizerSpec | None = None,
                startup: dict[str, float] | None = None) -> EngineInfo:
    """What the core says once ``engine`` is up; ``tokenizer``: the checkpoint's, when already made;
    ``startup``: the core process's start-up phases (seconds), where it has them."""
    return EngineInfo(max_model_len=engine.max_model_len, vocab_size=engine.checkpoint.config.vocab_size,
                      num_blocks=engine.num_blocks, block_size=engine.config.block_size, device=engine.backend.name,
                      tokenizer=tokenizer or TokenizerSpec.of(engine.checkpoint.tokenizer),
                      weights=engine.weight_descriptions, startup=startup or {})


def final_counters(stats: EngineStats) -> str:
    return (f"stopped with {stats.kv_blocks_used} of {stats.kv_blocks_total} KV blocks in use, {stats.running} "
            f"requests running and {stats.waiting} waiting")


@dataclass
class CoreLink:
    """What a front end needs to reach an engine core: its address, its info, and the read end of
    its lifeline (a ``multiprocessing`` connection or a raw fd; end-of-file: the core is gone)."""

    address: str
    info: EngineInfo
    lifeline: object
    describe_exit: object = None      # () -> str, where the front end can see how the core ended

    def lifeline_fd(self) -> int:
        return self.lifeline if isinstance(self.lifeline, int) else self.lifeline.fileno()


def new_address() -> str:
    """An ipc:// address in a fresh private directory (removed with :func:`remove_address`)."""
    return f"ipc://{tempfile.mkdtemp(prefix='anydev-core-')}/engine"


def remove_address(address: str) -> None:
    path = address.removeprefix("ipc://")
    for target in (path, os.path.dirname(path)):
        try:
            os.unlink(target) if target == path else os.rmdir(target)
        except OSError:
            pass


# ---- on a thread ---------------------------------------------------------------------------------
class EngineCoreThread:
    """The core on a thread of this process, over ``engine`` (which the caller closes). One client.
    Its address and lifeline are made by :meth:`start`: one never started (an app whose lifespan
    never ran) holds nothing to release."""

    def __init__(self, engine: InferEngine):
        self.engine = engine
        self.address: str | None = None
        self.failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> CoreLink:
        self.address = new_address()
        self._read_end, self._write_end = os.pipe()
        self._thread = threading.Thread(target=self._run, name="anydev-engine-core", daemon=True)
        self._thread.start()
        return CoreLink(self.address, engine_info(self.engine), self._read_end, self._describe)

    def _run(self) -> None:
        try:
            EngineCore(self.engine, self.address, {client_identity(0)}).run()
        except BaseException as exc:       # said to the client as EngineFailure; kept for join()
            self.failure = exc
        finally:
            os.close(self._write_end)

    def _describe(self) -> str:
        return f"the engine core thread ended: {self.failure}" if self.failure else "the engine core thread ended"

    def join(self, timeout: float) -> None:
        if self._thread is None:
            return
        self._thread.join(timeout)
        if not self._thread.is_alive():
            os.close(self._read_end)
            remove_address(self.address)


# ---- in a process of its own ---------------------------------------------------------------------
def _core_process_main(model: str | None, config: EngineConfig, address: str, lifelines: dict, ready,
                       spawned_at: float) -> None:
    """The engine core process: check the device, open the model, send its tokenizer on ``ready`` (the
    front end builds it while the weights load), load, say ready (or why not) on ``ready`` with its
    start-up phases since ``spawned_at`` (``time.time()`` just before the spawn), serve, print the
    final counters. It leaves the server's process group first: Ctrl-C in
    the terminal and a supervisor's stop signal the whole group, and the core leaves those to the
    front ends, which drain and then say :class:`Shutdown` (a front end that dies is seen through its
    lifeline)."""
    from anydev.core.process_timeline import ProcessTimeline

    startup = ProcessTimeline(started=spawned_at)   # "interpreter": the spawn, unpickling and this module's imports
    os.setsid()
    from anydev.core import InferEngine
    from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint
    from anydev.plugin_api import load_backend

    startup.mark("imports")
    try:
        load_backend(config.device)   # an unknown or unavailable device fails first, before any model work
        startup.mark("backend open")
        checkpoint = demo_checkpoint() if model is None else open_checkpoint(model)
        tokenizer = TokenizerSpec.of(checkpoint.tokenizer)
        ready.send(("tokenizer", ENCODER.encode(tokenizer)))
        startup.mark("checkpoint + tokenizer")
        engine = InferEngine(checkpoint, config, progress=True)
        startup.mark_engine(engine)
    except AnydevError as exc:
        ready.send(("failed", str(exc)))
        sys.exit(1)
    except BaseException as exc:
        ready.send(("failed", f"{type(exc).__name__}: {exc}"))
        raise
    with engine:
        ready.send(("ready", ENCODER.encode(engine_info(engine, tokenizer, startup.to_json()["phases"]))))
        core = EngineCore(engine, address, set(lifelines), lifelines)
        try:
            core.run()
        except AnydevError:
            sys.exit(1)     # a named failure (a rank died, ...): the front ends were sent it and say it in one line
        except Exception as exc:
            print(f"anydev engine core: failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            raise           # a bug: its traceback is what finds it
        print(f"anydev engine core: {final_counters(core.stats())}", flush=True)


class EngineCoreProcess:
    """The core in a process of its own (spawned: no forked copy of this process's threads), serving
    ``num_clients`` front ends. :meth:`start` returns once the engine is up, or raises
    :class:`EngineCoreError` with the reason it could not start; :attr:`tokenizer` is the model's,
    built here while the core loaded the weights."""

    def __init__(self, model: str | None, config: EngineConfig, num_clients: int = 1):
        self.address = new_address()
        context = multiprocessing.get_context("spawn")
        self._ready_read, ready_write = context.Pipe(duplex=False)
        self.client_lifelines = [context.Pipe(duplex=False) for _ in range(num_clients)]   # (core's read, client's write)
        lifelines = {client_identity(i): read for i, (read, _) in enumerate(self.client_lifelines)}
        # time.time() here stands for the spawn (start() follows at once): the core's phases count from it.
        self.process = context.Process(target=_core_process_main, name="anydev-engine-core",
                                       args=(model, config, self.address, lifelines, ready_write, time.time()))
        self._ready_write = ready_write
        self.info: EngineInfo | None = None
        self.tokenizer: Tokenizer | None = None

    def start(self, while_starting: Callable[[], None] | None = None) -> EngineInfo:
        """Start the core and wait until its engine is up; ``while_starting()`` (optional) runs here
        meanwhile (the front end's own start-up work, beside the core's)."""
        self.process.start()
        self._ready_write.close()                 # the core holds the only write end: EOF when it ends
        for read, _ in self.client_lifelines:
            read.close()                          # the core holds these read ends
        try:
            if while_starting is not None:
                while_starting()
            state, detail = self._next_state()
            if state == "tokenizer":
                self.tokenizer = msgspec.msgpack.decode(detail, type=TokenizerSpec).build()
                state, detail = self._next_state()
            if state != "ready":
                raise EngineCoreError(detail)
        except BaseException:
            self.stop(timeout=10)
            raise
        self.info = msgspec.msgpack.decode(detail, type=EngineInfo)
        return self.info

    def _next_state(self) -> tuple[str, object]:
        """The core's next word on its start: ("tokenizer", spec), ("ready", info) or ("failed", why)."""
        while not self._ready_read.poll(0.5):
            if not self.process.is_alive():
                raise EngineCoreError(f"the engine core exited with code {self.process.exitcode} while starting")
        try:
            return self._ready_read.recv()
        except EOFError:
            self.process.join(5)
            raise EngineCoreError(f"the engine core exited with code {self.process.exitcode} while starting") from None

    def link(self, describe: bool = True) -> CoreLink:
        """The link for a front end; ``describe=False`` for one in another process (it cannot ask
        this process how the core ended)."""
        return CoreLink(self.address, self.info, self._ready_read, self.describe_exit if describe else None)

    def client_lifeline(self, index: int):
        """The write end the front end ``index`` holds for as long as it lives."""
        return self.client_lifelines[index][1]

    def describe_exit(self) -> str:
        self.process.join(0.5)
        code = self.process.exitcode
        if code is None:
            return "the engine core stopped answering"
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"the engine core process {how}"

    def stop(self, timeout: float) -> int | None:
        """Wait ``timeout`` s for the core to end (it does once its clients are gone), then kill it;
        returns its exit code."""
        if self.process.pid is not None:
            self.process.join(timeout)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        remove_address(self.address)
        return self.process.exitcode
