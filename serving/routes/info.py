"""The routes that report on the server: ``/health``, ``/metrics`` (Prometheus) and ``/v1/models``."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..openapi import error_doc
from ..protocol import APIError
from ..state import ServerState


def add_info_routes(app: FastAPI, state: ServerState, authorized: list, denied: dict) -> None:
    """``/health`` (open), ``/metrics`` (behind the key when the limits say so) and ``/v1/models``."""

    @app.get("/health", responses={503: error_doc("the engine is not running")})
    async def health():
        if not state.engine.healthy:
            raise APIError(503, "the engine is not running" + (f": {state.engine.failure}" if state.engine.failure else ""),
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
