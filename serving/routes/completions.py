"""The ``/v1/completions`` route: a text prompt (or token ids) completed, whole or streamed."""
from __future__ import annotations

from fastapi import FastAPI, Request

from ..generation import serve
from ..prompts import check_model, completion_prompt_ids
from ..protocol import CompletionRequest
from ..state import ServerState


def add_completion_routes(app: FastAPI, state: ServerState, authorized: list, responses: dict) -> None:

    @app.post("/v1/completions", dependencies=authorized, responses=responses)
    async def completions(body: CompletionRequest, request: Request):
        body.check_unsupported()
        check_model(state, body.model)
        prompt_ids = completion_prompt_ids(state, body.prompt)
        return await serve(state, request, body, prompt_ids, body.max_tokens, chat=False)
