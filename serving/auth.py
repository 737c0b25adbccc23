"""The API key check: a bearer token compared in constant time."""
from __future__ import annotations

import hmac

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .protocol import APIError

bearer = HTTPBearer(auto_error=False, description="the server's API key (--api-key or ANYDEV_API_KEY)")


async def authorize(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """A 401 unless the request carries ``Authorization: Bearer <the key>``; the key is compared in
    constant time (hmac.compare_digest), and neither it nor what was sent is ever logged."""
    key: str = request.app.state.anydev.api_key
    sent = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(sent.encode(), key.encode()):
        raise APIError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                       type="authentication_error", code="invalid_api_key")
