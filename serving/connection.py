"""Per-connection limits that uvicorn does not have, as its h11 protocol with a gate and three timers.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but nothing bounds a
client that connects and never finishes sending its request (slowloris: the headers or the body
trickle in, or never come) or one that stops reading a streamed answer (once the socket buffers are
full, every write waits for it forever). Here:

- **connection cap:** every accepted socket counts against ``max_connections`` (:class:`ConnectionGate`),
  whether or not it has sent anything; past the cap a new connection takes the place of the one that
  has waited longest without a request in progress, so a flood of idle sockets never keeps a real
  request out, and the open files stay bounded;
- **first-request timeout:** a new connection must send the first bytes of a request within
  ``first_request_timeout`` seconds (short: an idle socket costs a file, nothing else), else it is
  closed without an answer;
- **read timeout:** a request, head and body, must have arrived ``read_timeout`` seconds after the
  connection opened or the previous response ended; otherwise the client gets a 408 and the
  connection is closed;
- **send timeout:** a response that cannot be written for ``send_timeout`` seconds (uvicorn's write
  buffer stays above its high-water mark: the client reads nothing) drops the connection at once.

A dropped connection is a disconnected client to the handler, which aborts the request: its KV
blocks come back. ``on_drop(reason)`` is told each drop ("read_timeout", "send_timeout",
"first_request_timeout", "evicted_idle" or "over_cap").
"""
from __future__ import annotations

import asyncio
import json
import socket
from collections import OrderedDict
from collections.abc import Callable

from uvicorn.protocols.http.h11_impl import H11Protocol

from .accepting import GRACEFUL_CLOSE


class ConnectionGate:
    """The cap on a front end's open connections, counting every accepted socket.

    Connections are either *waiting* (no request in progress: nothing sent yet, or idle between
    keep-alive requests) or *busy*. Past the cap a new connection evicts the connection that has
    been waiting longest; when every connection is busy the new one is refused. Eviction and
    refusal close the socket at once, without an answer and without a log line: under a flood,
    writing answers would cost more than the flood."""

    def __init__(self, cap: int, on_drop: Callable[[str], None]):
        if cap < 1:
            raise ValueError(f"the connection cap must be >= 1, got {cap}")
        self.cap = cap
        self.on_drop = on_drop
        self._open: set = set()
        self._waiting: OrderedDict = OrderedDict()   # oldest first

    @property
    def open_count(self) -> int:
        return len(self._open)

    def admit(self, conn) -> bool:
        """Count ``conn`` in, as waiting; False: refused (every open connection is busy)."""
        if len(self._open) >= self.cap:
            if not self._waiting:
                self.on_drop("over_cap")
                return False
            evicted, _ = self._waiting.popitem(last=False)
            self._open.discard(evicted)
            self.on_drop("evicted_idle")
            evicted.evict()
        self._open.add(conn)
        self._waiting[conn] = None
        return True

    def waiting(self, conn) -> None:
        if conn in self._open:
            self._waiting[conn] = None
            self._waiting.move_to_end(conn)

    def replace(self, old, new) -> None:
        """``new`` takes ``old``'s place, busy (a bare socket becoming its protocol)."""
        if old in self._open:
            self._open.discard(old)
            self._waiting.pop(old, None)
            self._open.add(new)

    def __contains__(self, conn) -> bool:
        """``conn`` is counted: admitted (or taking an admitted one's place) and not closed since."""
        return conn in self._open

    def busy(self, conn) -> None:
        self._waiting.pop(conn, None)

    def closed(self, conn) -> None:
        self._open.discard(conn)
        self._waiting.pop(conn, None)


def guarded_h11_protocol(read_timeout: float, send_timeout: float, on_drop: Callable[[str], None],
                         max_connections: int, first_request_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the connection gate and the three timeouts (pass it as
    ``uvicorn.Config(http=...)``). One gate for all the protocol's connections; the sockets are
    admitted, and held until their first bytes, by serving/accepting.py's acceptor
    (:func:`~anydev.serving.accepting.take_over_accepting` once the server has started)."""

    body = json.dumps({"error": {
        "message": f"the request did not arrive within {read_timeout:g} seconds (--read-timeout)",
        "type": "invalid_request_error", "param": None, "code": "request_timeout"}}).encode()
    request_timeout_response = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    gate = ConnectionGate(max_connections, on_drop)
    gate_, first_request_timeout_, on_drop_ = gate, first_request_timeout, on_drop

    class GuardedH11Protocol(H11Protocol):
        # what serving/accepting.py's acceptor, which admits the sockets, needs
        gate = gate_
        first_request_timeout = first_request_timeout_
        on_drop = staticmethod(on_drop_)

        _read_timer: asyncio.TimerHandle | None = None
        _send_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            # counted by the gate since its accept (serving/accepting.py); its first bytes are in
            super().connection_made(transport)
            if self not in gate:
                # taken by the loop's own accept (a front end still starting while another has set
                # the shared listening sockets' reset-on-close): answered, it ends with a FIN too
                transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, GRACEFUL_CLOSE)
            self._arm_read_timer(read_timeout, "read_timeout")

        def connection_lost(self, exc) -> None:
            gate.closed(self)
            self._cancel_timers()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            gate.busy(self)
            super().data_received(data)
            if self._request_received():
                self._cancel_read_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()   # may start a pipelined request at once
            if not self.transport.is_closing():
                self._arm_read_timer(read_timeout, "read_timeout")
                if self._request_received():
                    self._cancel_read_timer()
                else:
                    gate.waiting(self)

        def evict(self) -> None:
            """Closed by the gate to make room: at once, unanswered."""
            self._cancel_timers()
            self.transport.abort()

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._send_timer is None:
                self._send_timer = self.loop.call_later(send_timeout, self._drop, "send_timeout")

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        # ---- helpers -------------------------------------------------------------------------
        def _request_received(self) -> bool:
            """The current request's head and whole body are in."""
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete and not cycle.more_body

        def _arm_read_timer(self, seconds: float, reason: str) -> None:
            self._cancel_read_timer()
            self._read_timer = self.loop.call_later(seconds, self._drop, reason)

        def _cancel_read_timer(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _cancel_timers(self) -> None:
            self._cancel_read_timer()
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _drop(self, reason: str) -> None:
            self._read_timer = self._send_timer = None
            self._cancel_timers()
            on_drop(reason)
            cycle = self.cycle
            if reason == "read_timeout" and (cycle is None or cycle.response_complete or not cycle.response_started):
                # no response is being written (none yet, or the previous one is done): a 408 fits
                self.transport.write(request_timeout_response)
            if self.transport.get_write_buffer_size():
                self.transport.abort()       # what is left would wait for a client that does not read
            else:
                self.transport.close()

    return GuardedH11Protocol
