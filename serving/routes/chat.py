"""The ``/v1/chat/completions`` route: messages through the model's chat template, answered whole or streamed."""
from __future__ import annotations

from fastapi import FastAPI, Request

from ..generation import serve
from ..prompts import chat_prompt_ids, check_model, max_tokens
from ..protocol import APIError, ChatRequest
from ..state import ServerState
from ..tools import TOOL_PARSERS, tool_use


def add_chat_routes(app: FastAPI, state: ServerState, authorized: list, responses: dict) -> None:

    @app.post("/v1/chat/completions", dependencies=authorized, responses=responses)
    async def chat_completions(body: ChatRequest, request: Request):
        body.check_unsupported()
        check_model(state, body.model)
        if body.calls_tools and state.tool_parser is None:
            raise APIError(400, f"this server reads no tool calls: start it with --tool-call-parser "
                                f"({', '.join(sorted(TOOL_PARSERS))})", param="tools", code="unsupported_parameter")
        prompt_ids = chat_prompt_ids(state, body)
        if body.max_tokens is not None and body.max_completion_tokens is not None:
            max_tokens(state, prompt_ids, body.max_tokens)     # both given: both within the limits
        return await serve(state, request, body, prompt_ids, None, body.requested_max_tokens, chat=True,
                           tools=tool_use(state.tool_parser, body) if body.calls_tools else None)
