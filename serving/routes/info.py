"""The routes that report on the server: ``/health``, ``/metrics`` (Prometheus) and ``/v1/models``."""
from __future__ import annotations

import time

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..openapi import error_doc
from ..protocol import APIError
from ..state import ServerState


def add_info_routes(app: FastAPI, state: ServerState, authorized: list, denied: dict) -> None:
    """``/health`` (open), ``/metrics`` (behind the key when the limits say so) and ``/v1/models``."""

    @app.get("/health", responses={503: error_doc("the engine is not running, or it has work and does not step")})
    async def health():
        engine = state.engine
        if engine.failure is None and engine.stalled:
            silent = time.monotonic() - engine.last_heard
            raise APIError(503, f"the engine core has work but has not stepped for {silent:.1f} s", type="server_error")
        if not engine.healthy:
            raise APIError(503, "the engine is not running" + (f": {engine.failure}" if engine.failure else ""),
                           type="server_error")
        return {"status": "ok"}

    metrics_key = state.limits.metrics_need_key and state.api_key is not None

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=authorized if metrics_key else [],
             responses=denied if metrics_key else {})
    async def prometheus_metrics():
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", dependencies=authorized, responses=denied)
    async def models():
        return {"object": "list", "data": [model_card(state)]}


def model_card(state: ServerState) -> dict:
    return {"id": state.model_name, "object": "model", "created": 0, "owned_by": "anydev",
            "max_model_len": state.engine.info.max_model_len}
