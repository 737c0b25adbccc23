"""Server-sent events of a streamed request: a chunk per settled piece of text, the finish reason, then [DONE]."""
from __future__ import annotations

import json

from .async_engine import EngineStoppedError, FailedRequestError, RequestStream
from .protocol import APIError, finish_reason, usage
from .state import ServerState
from .text import OutputText


async def stream_events(state: ServerState, stream: RequestStream, request_id: str, created: int, chat: bool,
                        include_usage: bool, continuous_usage: bool):
    """Server-sent events: a chunk per settled piece of text, the finish reason last, then ``[DONE]``.
    Usage as OpenAI sends it: with ``include_usage`` every chunk has ``usage: null`` and one more
    chunk, with empty ``choices``, carries the usage before ``[DONE]``; without it no chunk has a
    usage field. With ``continuous_usage`` (an extension, as vLLM's) every chunk carries the usage
    so far, and a chunk comes for every step that gave the request a token, text or not. Leaving
    early (the client went away) aborts the request."""
    text = OutputText(state, stream)
    kind = "chat.completion.chunk" if chat else "text_completion"

    def event(choices: list[dict], usage: dict | None = None) -> str:
        chunk = {"id": request_id, "object": kind, "created": created, "model": state.model_name, "choices": choices}
        if include_usage or continuous_usage:
            chunk["usage"] = usage
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    def choice(delta: str, reason: str | None, first: bool = False) -> dict:
        if chat:
            message = {"role": "assistant", "content": delta} if first else ({"content": delta} if delta else {})
            return {"index": 0, "delta": message, "logprobs": None, "finish_reason": reason}
        return {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason}

    try:
        if chat:
            yield event([choice("", None, first=True)])
        try:
            async for progress in stream.updates():
                delta = text.delta(progress.num_tokens, progress.finished)
                if progress.finished:
                    seq = stream
                    yield event([choice(delta, finish_reason(seq.finish_reason))],
                                usage(seq) if continuous_usage else None)
                    if include_usage:
                        yield event([], usage(seq))
                elif continuous_usage:
                    yield event([choice(delta, None)], usage(stream, progress.num_tokens))
                elif delta:
                    yield event([choice(delta, None)])
        except EngineStoppedError as exc:
            error = APIError(503, str(exc), type="server_error")
            yield f"data: {json.dumps(error.body())}\n\n"
        except FailedRequestError as exc:
            error = APIError(500, str(exc), type="server_error", code="request_failed")
            yield f"data: {json.dumps(error.body())}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        state.engine.abort(stream)     # the client left early (or a no-op: it finished)
