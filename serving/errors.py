"""The app's error handlers: every error answered with the OpenAI error body, and counted; and the
API's answer to a request the engine failed or could not run (:func:`engine_error`)."""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .async_engine import EngineStoppedError, FailedRequestError
from .metrics import ServerMetrics
from .protocol import APIError


def engine_error(exc: EngineStoppedError | FailedRequestError) -> APIError:
    """The API's answer to an engine error: 503 when the engine stopped (no request can run), 500
    ``request_failed`` when this request failed while it ran (the engine serves on)."""
    if isinstance(exc, EngineStoppedError):
        return APIError(503, str(exc), type="server_error")
    return APIError(500, str(exc), type="server_error", code="request_failed")


def add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    def answer(error: APIError) -> JSONResponse:
        metrics.rejected.labels(str(error.status)).inc()
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return answer(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        location = [str(part) for part in first.get("loc", ()) if part != "body"]
        param = ".".join(location) or None
        if first.get("type") == "json_invalid":
            message, param = "the request body is not valid JSON", None
        else:
            message = f"{param or 'body'}: {first.get('msg', 'invalid value')}"
        return answer(APIError(400, message, param=param))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):   # a bug: said as such, in the API's shape
        return answer(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return answer(APIError(exc.status_code, str(exc.detail), type=kind, headers=exc.headers))   # 405: Allow
