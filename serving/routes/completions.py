"""The ``/v1/completions`` route: a text prompt (or token ids) completed, whole or streamed."""
from __future__ import annotations

import asyncio
import time

from fastapi import FastAPI, Request

from ..generation import abort_all, new_request_id, serve, start, streamed_answer
from ..output import merged_answer
from ..prompts import check_model, completion_prompts
from ..protocol import CompletionRequest
from ..state import ServerState


def add_completion_routes(app: FastAPI, state: ServerState, authorized: list, responses: dict) -> None:

    @app.post("/v1/completions", dependencies=authorized, responses=responses)
    async def completions(body: CompletionRequest, request: Request):
        body.check_unsupported()
        check_model(state, body.model)
        prompts = completion_prompts(state, body.prompt)
        if len(prompts) == 1:
            return await serve(state, request, body, *prompts[0], body.max_tokens, chat=False)
        if body.stream:
            return await streamed_prompts(state, body, prompts)
        answers = await asyncio.gather(*(serve(state, request, body, ids, text, body.max_tokens, chat=False)
                                         for ids, text in prompts), return_exceptions=True)
        failed = next((a for a in answers if isinstance(a, BaseException)), None)
        if failed is not None:
            raise failed
        return merged_answer(answers)


async def streamed_prompts(state: ServerState, body: CompletionRequest, prompts: list[tuple[list[int], str | None]]):
    """Several prompts' answers streamed as one: every prompt started, then their choices interleaved.
    One prompt that cannot start stops the others and answers the request."""
    started = await asyncio.gather(*(start(state, body, ids, text, body.max_tokens, chat=False) for ids, text in prompts),
                                   return_exceptions=True)
    failed = next((s for s in started if isinstance(s, BaseException)), None)
    if failed is not None:
        abort_all(state, [s for s in started if not isinstance(s, BaseException)])
        raise failed
    return streamed_answer(state, body, started, new_request_id(chat=False), int(time.time()), chat=False)
