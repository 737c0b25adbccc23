"""Running one request: handed to the engine core, then answered whole or streamed as server-sent events."""
from __future__ import annotations

import asyncio
import time
import uuid

from fastapi import Request
from fastapi.responses import StreamingResponse

from anydev.core.output import OutputText

from .async_engine import EngineStoppedError, FailedRequestError, InvalidRequestError, QueueFullError, RequestStream
from .output import Echo, joined, logprobs_writer, prompt_text
from .prompts import max_tokens
from .protocol import APIError, finish_reason, usage
from .sse import stream_events
from .state import ServerState


async def serve(state: ServerState, request: Request, body, prompt_ids: list[int], prompt: str | None,
                requested: int | None, chat: bool):
    """One prompt's answer. Completions with ``echo`` repeat the prompt (its text ``prompt``, or its
    decode) and its logprobs first; ``max_tokens`` 0 scores the prompt: one token runs and is not answered."""
    limit = max_tokens(state, prompt_ids, requested)
    sampling = body.sampling(max(limit, 1))
    echo = None
    if not chat and body.echo:
        echo = Echo(prompt if prompt is not None else prompt_text(state.tokenizer, prompt_ids), limit == 0)
    try:
        stream = await state.engine.add_request(prompt_ids, sampling, max_waiting=state.limits.max_waiting,
                                                timeout=state.limits.request_timeout,
                                                text=OutputText(state.tokenizer, sampling.stop))
    except QueueFullError as exc:
        raise APIError(429, str(exc), type="rate_limit_error", code="queue_full",
                       headers={"Retry-After": str(state.limits.retry_after_seconds)}) from exc
    except EngineStoppedError as exc:
        raise APIError(503, str(exc), type="server_error") from exc
    except InvalidRequestError as exc:
        raise APIError(400, str(exc), param="prompt") from exc
    request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    created = int(time.time())
    if body.stream:
        options = body.stream_options
        events = stream_events(state, stream, request_id, created, chat, bool(options and options.include_usage),
                               bool(options and options.continuous_usage_stats), echo)
        return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    return await whole_answer(state, request, stream, request_id, created, chat, echo)


async def whole_answer(state: ServerState, request: Request, stream: RequestStream, request_id: str,
                       created: int, chat: bool, echo: Echo | None = None) -> dict:
    collected = asyncio.ensure_future(_collect(stream))
    try:
        while not collected.done():
            done, _ = await asyncio.wait({collected}, timeout=0.5)
            if not done and await request.is_disconnected():
                collected.cancel()
                raise APIError(499, "the client disconnected")
        collected.result()
    except EngineStoppedError as exc:
        raise APIError(503, str(exc), type="server_error") from exc
    except FailedRequestError as exc:
        raise APIError(500, str(exc), type="server_error", code="request_failed") from exc
    finally:
        state.engine.abort(stream)     # no-op when it finished
    seq = stream
    seq.text.finish()
    content = seq.text.take()
    logprobs = logprobs_writer(state.tokenizer, stream.sampling, chat)
    scores = logprobs.take(seq.output, seq.logprobs, 0 if echo and echo.only else None) if logprobs else None
    if echo is not None:
        content = echo.text + ("" if echo.only else content)
        scores = joined(logprobs.prompt(seq.prompt, seq.prompt_logprobs), scores) if logprobs else None
    choice = {"index": 0, "logprobs": scores,
              "finish_reason": "length" if echo and echo.only else finish_reason(seq.finish_reason)}
    if chat:
        choice["message"] = {"role": "assistant", "content": content}
    else:
        choice["text"] = content
    return {"id": request_id, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": state.model_name, "choices": [choice],
            "usage": usage(seq, 0 if echo and echo.only else None)}


async def _collect(stream: RequestStream) -> None:
    async for _ in stream.updates():
        pass
