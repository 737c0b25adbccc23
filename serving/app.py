"""The app factory: the OpenAI-compatible HTTP API over the engine core (FastAPI), the front end.

It tokenizes, hands token ids to the engine core through an :class:`AsyncEngine`, which turns the
token ids that come back into text (an :class:`~anydev.core.output.OutputText`: stop strings
included), and streams that text.

``/v1/completions`` and ``/v1/chat/completions`` (streamed as server-sent events or not), ``/v1/models``,
``/health`` and ``/metrics`` (Prometheus), in :mod:`.routes`. Every bad request is answered with an
OpenAI-style error body (:mod:`.errors`) and the server goes on serving; a client that disconnects
has its request aborted.
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI

from anydev.core.loading.tokenizer import Tokenizer

from .async_engine import AsyncEngine
from .auth import authorize
from .errors import add_error_handlers
from .limits import BodySizeLimit, ServerLimits
from .metrics import ServerMetrics
from .openapi import document_errors_as_answered, error_doc
from .routes.chat import add_chat_routes
from .routes.completions import add_completion_routes
from .routes.info import add_info_routes
from .state import ServerState
from .tools import TOOL_PARSERS

if TYPE_CHECKING:
    from anydev.core import InferEngine

__all__ = ["ServerState", "create_app"]


def create_app(engine: InferEngine | AsyncEngine, model_name: str, limits: ServerLimits | None = None,
               api_key: str | None = None, tokenizer: Tokenizer | None = None,
               tool_call_parser: str | None = None) -> FastAPI:
    """The app over an engine core's client (not connected yet: the app's lifespan connects it and,
    at shutdown, aborts what still runs and says goodbye), whose model's ``tokenizer`` it uses; or
    over an :class:`InferEngine` of this process, whose core then runs on a thread (the caller
    closes the engine). ``tool_call_parser``: a name in :data:`~.tools.TOOL_PARSERS` (chat requests with
    tools are refused without one)."""
    limits = limits or ServerLimits()
    if not isinstance(engine, AsyncEngine):   # an InferEngine (not imported here: the front ends load no torch)
        tokenizer = engine.checkpoint.tokenizer
        engine = AsyncEngine.unstarted_over(engine)
    metrics = ServerMetrics(engine)
    engine.observer = metrics
    parser = TOOL_PARSERS[tool_call_parser]() if tool_call_parser is not None else None
    state = ServerState(engine, tokenizer, metrics, model_name, limits, api_key, parser)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await engine.connect()
        yield
        await engine.close()

    app = FastAPI(title="anydev", description="OpenAI-compatible API over the anydev engine", lifespan=lifespan)
    app.state.anydev = state
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)
    add_error_handlers(app, metrics)
    document_errors_as_answered(app, model_name, limits)
    # With a key, the schema declares the bearer scheme on exactly the routes that check it.
    authorized = [Depends(authorize)] if api_key is not None else []
    denied = {401: error_doc("missing or wrong API key")} if api_key is not None else {}
    generating = {200: {"description": "the answer (JSON), or server-sent events with stream=true",
                        "content": {"text/event-stream": {}}},
                  400: error_doc("a bad request: the error names the parameter"), **denied,
                  404: error_doc("the model is not served here (code model_not_found)"),
                  413: error_doc("the body is over --max-body-bytes"),
                  429: error_doc("the waiting queue is full (--max-waiting); retry after Retry-After seconds"),
                  500: error_doc("this request failed while it ran (its sampling failed), or tool_choice required "
                                      "or named and the answer holds no such call (tool_call_not_parsed); "
                                      "the server serves on"),
                  503: error_doc("the server is shutting down or its engine failed")}
    add_info_routes(app, state, authorized, denied)
    add_completion_routes(app, state, authorized, generating)
    add_chat_routes(app, state, authorized, generating)
    return app
