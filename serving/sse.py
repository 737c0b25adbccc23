"""Server-sent events of a streamed request: a chunk per settled piece of text, the finish reason, then [DONE]."""
from __future__ import annotations

import json

from .async_engine import EngineStoppedError, FailedRequestError, RequestStream
from .output import Echo, logprobs_writer
from .protocol import APIError, finish_reason, usage
from .state import ServerState


async def stream_events(state: ServerState, stream: RequestStream, request_id: str, created: int, chat: bool,
                        include_usage: bool, continuous_usage: bool, echo: Echo | None = None):
    """Server-sent events: a chunk per settled piece of text, the finish reason (with usage) last,
    then ``[DONE]``; with ``continuous_usage`` a chunk (with usage) for every step that gave the
    request a token, text or not. Leaving early (the client went away) aborts the request."""
    text = stream.text
    logprobs = logprobs_writer(state.tokenizer, stream.sampling, chat)
    kind = "chat.completion.chunk" if chat else "text_completion"

    def event(choices: list[dict], usage: dict | None = None) -> str:
        chunk = {"id": request_id, "object": kind, "created": created, "model": state.model_name, "choices": choices}
        if usage is not None:
            chunk["usage"] = usage
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    def choice(delta: str, reason: str | None, first: bool = False, upto: int | None = None) -> dict:
        scores = logprobs.take(stream.output, stream.logprobs, upto) if logprobs and not first else None
        if chat:
            message = {"role": "assistant", "content": delta} if first else ({"content": delta} if delta else {})
            return {"index": 0, "delta": message, "logprobs": scores, "finish_reason": reason}
        return {"index": 0, "text": delta, "logprobs": scores, "finish_reason": reason}

    try:
        if chat:
            yield event([choice("", None, first=True)])
        try:
            async for progress in stream.updates():
                if echo is not None:      # the prompt first (its logprobs arrive with the first token)
                    scores = logprobs.prompt(stream.prompt, stream.prompt_logprobs) if logprobs else None
                    yield event([{"index": 0, "text": echo.text, "logprobs": scores, "finish_reason": None}])
                    echo = None
                if progress.finished:
                    text.finish()
                delta = text.take()
                if progress.finished:
                    seq = stream
                    yield event([choice(delta, finish_reason(seq.finish_reason))], usage(seq))
                    if include_usage:
                        yield event([], usage(seq))
                elif continuous_usage:
                    yield event([choice(delta, None, upto=progress.num_tokens)], usage(stream, progress.num_tokens))
                elif delta or (logprobs and stream.logprobs):
                    yield event([choice(delta, None, upto=progress.num_tokens)])
        except EngineStoppedError as exc:
            error = APIError(503, str(exc), type="server_error")
            yield f"data: {json.dumps(error.body())}\n\n"
        except FailedRequestError as exc:
            error = APIError(500, str(exc), type="server_error", code="request_failed")
            yield f"data: {json.dumps(error.body())}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        state.engine.abort(stream)     # the client left early (or a no-op: it finished)
