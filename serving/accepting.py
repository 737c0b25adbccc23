"""The accept path of ``anydev serve``: the connection gate applied as each socket is accepted.

asyncio's own accept loop takes up to ``backlog`` sockets in one tick and builds a transport and a
protocol for each, in a task of its own, before the gate can see it: under a flood of idle sockets
the open files run past the cap by that batch, and the event loop spends its time building objects
for sockets that never send a byte while legitimate requests wait. :func:`take_over_accepting`
replaces that loop on uvicorn's listening sockets:

- one tick accepts at most :data:`ACCEPT_BATCH` sockets on each listening socket, and at most half
  the cap (:func:`accept_batch`), so the loop's other work (the requests) runs between batches, and
  a socket that has sent its request is handed on before later accepts could push it out;
- the accept loop is kept lean, for a flood's every socket passes through it: a bare socket is its
  descriptor alone, and the listening socket's SO_LINGER (zero: a close resets) is inherited by
  each accepted one, so that closing it is one call;
- an accepted socket is counted by the gate at once, as a *bare* socket: no transport, no protocol.
  Past the cap the gate closes the connection that has waited longest (a bare one's file is closed
  right there, so the open files never pass the cap), or the new socket when every connection is busy;
- a bare socket gets its transport and protocol when its first bytes arrive; one that sends nothing
  for ``first_request_timeout`` seconds is closed unanswered, one that its client closes is closed;
  waiting costs it no event-loop registration and no timer (see :class:`GatedAcceptor`);
- a burst of connects waits in the kernel's accept queues, which this loop drains quickly: the
  listening sockets and their queues are serving/listening.py's.
"""
from __future__ import annotations

import asyncio
import errno
import os
import select
import selectors
import socket
import struct
from collections import OrderedDict
from collections.abc import Callable

#: Sockets accepted on one listening socket per tick of the event loop at most.
ACCEPT_BATCH = 64
#: SO_LINGER on, zero seconds: close() resets the connection, the cheapest end for the kernel (no
#: FIN exchange, no FIN_WAIT or TIME_WAIT state), and an unanswered one is all an idle socket gets.
RESET_ON_CLOSE = struct.pack("ii", 1, 0)
#: SO_LINGER off: a connection handed to its protocol (answered), or timed out, ends with a FIN.
GRACEFUL_CLOSE = struct.pack("ii", 0, 0)
#: How often the bare sockets are swept for the first-request timeout (so it holds to within this).
SWEEP_SECONDS = 0.25
#: Seconds accepting pauses when the process is out of files (the gate's cap is set below the limit).
OUT_OF_FILES_PAUSE = 0.5


class _WaitingSet:
    """The bare sockets' readiness: one epoll set where there is epoll (a C call per registration),
    else the platform's selector (kqueue, poll), watched through its one descriptor either way."""

    def __init__(self):
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._selector = None if self._epoll is not None else selectors.DefaultSelector()

    def fileno(self) -> int:
        return (self._epoll or self._selector).fileno()

    def add(self, fd: int) -> None:
        if self._epoll is not None:
            self._epoll.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
        else:
            self._selector.register(fd, selectors.EVENT_READ)

    def remove(self, fd: int) -> None:
        if self._epoll is not None:
            self._epoll.unregister(fd)
        else:
            self._selector.unregister(fd)

    def ready(self) -> list[int]:
        if self._epoll is not None:
            return [fd for fd, _ in self._epoll.poll(0)]
        return [key.fd for key, _ in self._selector.select(0)]

    def close(self) -> None:
        (self._epoll or self._selector).close()


class _Bare:
    """An accepted socket that has sent nothing yet: counted by the gate, no protocol built (and no
    socket object: its descriptor only)."""

    __slots__ = ("acceptor", "fd", "accepted", "sock", "protocol")

    def __init__(self, acceptor: GatedAcceptor, fd: int, accepted: float):
        self.acceptor, self.fd, self.accepted, self.sock, self.protocol = acceptor, fd, accepted, None, None

    def evict(self) -> None:
        """Closed by the gate to make room: reset, the file released here."""
        self.acceptor._close(self)


class GatedAcceptor:
    """Accepts on the ``listeners`` (one port's listening sockets) for ``protocol_factory``'s
    connections under ``gate`` (:class:`~anydev.serving.connection.ConnectionGate`); ``on_drop(reason)``
    hears of each bare socket closed for ``first_request_timeout``. ``batch``: the sockets one tick
    accepts on each listener at most (default: :func:`accept_batch`'s).

    The bare sockets wait in a readiness set of their own (:class:`_WaitingSet`: one C call to enter
    and one to leave, on Linux), watched by the event loop through that set's one descriptor,
    and in accept order in a dict that a sweep every :data:`SWEEP_SECONDS` walks from the oldest end
    for the timeout: no timer and no event-loop registration per idle socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, listeners: list[socket.socket], protocol_factory: Callable,
                 gate, first_request_timeout: float, on_drop: Callable[[str], None], batch: int | None = None):
        self.loop, self.listeners, self.protocol_factory = loop, listeners, protocol_factory
        self.gate, self.first_request_timeout, self.on_drop = gate, first_request_timeout, on_drop
        self.batch = batch if batch is not None else accept_batch(gate.cap)
        self._bare: OrderedDict[int, _Bare] = OrderedDict()     # by descriptor, oldest accepted first
        self._poll = _WaitingSet()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    def start(self) -> None:
        for listener in self.listeners:
            listener.setblocking(False)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)   # inherited by each accepted
            self.loop.add_reader(listener.fileno(), self._accept, listener)
        self.loop.add_reader(self._poll.fileno(), self._ready)
        self._sweeper = self.loop.call_later(SWEEP_SECONDS, self._sweep)

    def close(self) -> None:
        """Stop accepting and close every bare socket (connections with a protocol are uvicorn's to end)."""
        if self._closed:
            return
        self._closed = True
        for listener in self.listeners:
            self.loop.remove_reader(listener.fileno())
            listener.close()
        self.loop.remove_reader(self._poll.fileno())
        if self._sweeper is not None:
            self._sweeper.cancel()
        for bare in list(self._bare.values()):
            self._close(bare)
        self._poll.close()

    # ---- the accept path -----------------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        self._ready()        # first the sockets whose requests came in since: none is pushed out unseen
        now = self.loop.time()
        for _ in range(self.batch):
            try:
                fd, _ = listener._accept()        # the descriptor, without building a socket object
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                self.loop.remove_reader(listener.fileno())
                self.loop.call_later(OUT_OF_FILES_PAUSE, self._resume, listener)
                return
            bare = _Bare(self, fd, now)
            if not self.gate.admit(bare):     # every open connection is busy: refused unanswered
                os.close(fd)
                continue
            self._bare[bare.fd] = bare
            self._poll.add(bare.fd)            # bytes already in: reported at once

    def _resume(self, listener: socket.socket) -> None:
        if not self._closed:
            self.loop.add_reader(listener.fileno(), self._accept, listener)

    def _ready(self) -> None:
        for fd in self._poll.ready():
            bare = self._bare.get(fd)
            if bare is not None:
                self._check(bare)

    def _check(self, bare: _Bare) -> None:
        """A bare socket has news: bytes hand it to its protocol, an end closes it."""
        sock = self._socket(bare.fd)
        try:
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            sock.detach()
            return
        except OSError:
            data = b""
        sock.detach()
        if data:
            self._hand_over(bare)
        else:
            self._close(bare)

    def _sweep(self) -> None:
        """Close the bare sockets older than the first-request timeout, oldest first."""
        oldest_allowed = self.loop.time() - self.first_request_timeout
        while self._bare:
            bare = next(iter(self._bare.values()))
            if bare.accepted > oldest_allowed:
                break
            self.on_drop("first_request_timeout")
            self._close(bare, graceful=True)   # an end, not a reset: the client reads it as the server closing
        if not self._closed:
            self._sweeper = self.loop.call_later(SWEEP_SECONDS, self._sweep)

    def _socket(self, fd: int) -> socket.socket:
        # family, type and protocol given: no getsockopt calls to find them out. The protocol must be
        # TCP's own number, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say TCP,
        # and a streamed token's small write would otherwise wait for the previous one's ACK.
        family = self.listeners[0].family
        proto = socket.IPPROTO_TCP if family in (socket.AF_INET, socket.AF_INET6) else 0
        return socket.socket(family, socket.SOCK_STREAM, proto, fd)

    def _close(self, bare: _Bare, graceful: bool = False) -> None:
        if self._bare.pop(bare.fd, None) is None:
            return
        self._poll.remove(bare.fd)
        self.gate.closed(bare)
        if graceful:
            sock = self._socket(bare.fd)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, GRACEFUL_CLOSE)
            sock.close()
        else:
            os.close(bare.fd)                  # reset: the listening socket's SO_LINGER, inherited

    def _hand_over(self, bare: _Bare) -> None:
        """The first bytes are in: build the transport and protocol, the gate's place passing to it."""
        del self._bare[bare.fd]
        self._poll.remove(bare.fd)
        self.gate.busy(bare)               # not evictable while its protocol is being built

        def protocol():
            bare.protocol = self.protocol_factory()
            self.gate.replace(bare, bare.protocol)
            return bare.protocol

        sock = self._socket(bare.fd)
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, GRACEFUL_CLOSE)   # answered: closes with a FIN
        bare.sock = sock
        task = self.loop.create_task(self.loop.connect_accepted_socket(protocol, sock))
        task.add_done_callback(lambda done: self._handed(bare, done))

    def _handed(self, bare: _Bare, done: asyncio.Task) -> None:
        if done.cancelled() or done.exception() is not None:
            self.gate.closed(bare)
            if bare.protocol is not None:
                self.gate.closed(bare.protocol)
            bare.sock.close()


def take_over_accepting(server) -> GatedAcceptor:
    """Replace asyncio's accept loop on a started ``uvicorn.Server``'s listening sockets with one
    :class:`GatedAcceptor`, for its protocol class's gate (``guarded_h11_protocol``). The acceptor
    holds duplicates of the listening sockets: :meth:`GatedAcceptor.close` it before the server's
    own shutdown, which closes the originals. A loop whose accepting is not a reader on the listening
    socket (uvloop's) is a RuntimeError: its accept would go on beside the acceptor's, past the gate."""
    config = server.config
    protocol_class = config.http_protocol_class
    loop = asyncio.get_running_loop()

    def factory():
        return protocol_class(config=config, server_state=server.server_state, app_state=server.lifespan.state)

    listeners = []
    for listening in server.servers:
        for listener in listening.sockets:
            if not loop.remove_reader(listener.fileno()):  # asyncio's accept loop
                raise RuntimeError(f"cannot take over accepting from {type(loop).__name__}: its own accept "
                                   "is not a reader on the listening socket (serve on asyncio's loop)")
            listeners.append(socket.socket(fileno=os.dup(listener.fileno())))
    acceptor = GatedAcceptor(loop, listeners, factory, protocol_class.gate, protocol_class.first_request_timeout,
                             protocol_class.on_drop)
    acceptor.start()
    return acceptor


def accept_batch(cap: int) -> int:
    """Sockets one tick accepts on a listening socket under a gate of ``cap``: at most
    :data:`ACCEPT_BATCH` and half the cap. A socket whose request is in when it is accepted is handed
    on at the next accept call (:meth:`GatedAcceptor._accept` first looks at the bare sockets), so
    that only the rest of its batch comes after it while it is bare: too few to push it out as the
    oldest waiting connection, unless more than half the cap is busy."""
    return max(1, min(ACCEPT_BATCH, cap // 2))
