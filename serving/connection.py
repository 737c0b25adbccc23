"""Per-connection time limits that uvicorn does not have, as its h11 protocol with two timers.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but nothing bounds a
client that connects and never finishes sending its request (slowloris: the headers or the body
trickle in, or never come) or one that stops reading a streamed answer (once the socket buffers are
full, every write waits for it forever). Here:

- **read timeout:** a request, head and body, must have arrived ``read_timeout`` seconds after the
  connection opened or the previous response ended; otherwise the client gets a 408 and the
  connection is closed;
- **send timeout:** a response that cannot be written for ``send_timeout`` seconds (uvicorn's write
  buffer stays above its high-water mark: the client reads nothing) drops the connection at once.

A dropped connection is a disconnected client to the handler, which aborts the request: its KV
blocks come back. ``on_drop(reason)`` is told each drop ("read_timeout" or "send_timeout").
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from uvicorn.protocols.http.h11_impl import H11Protocol


def guarded_h11_protocol(read_timeout: float, send_timeout: float,
                         on_drop: Callable[[str], None]) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the read and send timeouts (pass it as ``uvicorn.Config(http=...)``)."""

    body = json.dumps({"error": {
        "message": f"the request did not arrive within {read_timeout:g} seconds (--read-timeout)",
        "type": "invalid_request_error", "param": None, "code": "request_timeout"}}).encode()
    request_timeout_response = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    class GuardedH11Protocol(H11Protocol):
        _read_timer: asyncio.TimerHandle | None = None
        _send_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_read_timer()

        def connection_lost(self, exc) -> None:
            self._cancel_timers()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._request_received():
                self._cancel_read_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()   # may start a pipelined request at once
            if not self.transport.is_closing():
                self._arm_read_timer()
                if self._request_received():
                    self._cancel_read_timer()

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

        def _arm_read_timer(self) -> None:
            self._cancel_read_timer()
            self._read_timer = self.loop.call_later(read_timeout, self._drop, "read_timeout")

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
