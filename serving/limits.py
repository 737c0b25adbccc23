"""The server's limits, and the request body size check (an ASGI middleware, so an oversized body is
refused with 413 before it is read whole)."""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class ServerLimits:
    max_body_bytes: int = 1 << 20       # a request body above it: 413
    max_prompt_tokens: int = 1 << 30    # a prompt above it: 400 (the context caps it anyway)
    max_tokens: int = 4096              # max_tokens above it: 400; the default when a chat omits it
    max_waiting: int = 256              # requests waiting for admission; beyond: 429 + Retry-After
    retry_after_seconds: int = 1
    request_timeout: float | None = 600.0   # a request still running after it ends with finish reason "timeout"
    metrics_need_key: bool = False      # /metrics behind the API key too


class _TooLarge(Exception):
    pass


class BodySizeLimit:
    """Answers 413 (OpenAI-style body) for a request body above ``max_bytes``: at once when its
    Content-Length says so, else as soon as the bytes read pass it."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._refuse(send)
        seen, too_large, refused = 0, False, False

        async def counted_receive():
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    too_large = True
                    raise _TooLarge()
            return message

        async def checked_send(message):
            # Whatever the app answers once the body ran over the limit (FastAPI turns the error into
            # a 400 of its own) is replaced by the 413.
            nonlocal refused
            if not too_large:
                return await send(message)
            if not refused:
                refused = True
                await self._refuse(send)

        try:
            await self.app(scope, counted_receive, checked_send)
        except _TooLarge:
            if not refused:
                await self._refuse(send)

    async def _refuse(self, send) -> None:
        body = json.dumps({"error": {
            "message": f"the request body is larger than this server's limit of {self.max_bytes} bytes "
                       f"(--max-body-bytes)", "type": "invalid_request_error", "param": None,
            "code": "request_too_large"}}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
