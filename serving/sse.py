"""Server-sent events of a streamed request: a chunk per settled piece of text, the finish reason, then [DONE]."""
from __future__ import annotations

import json

from .async_engine import EngineStoppedError, FailedRequestError, RequestStream
from .output import Echo, logprobs_writer
from .protocol import APIError, finish_reason, usage
from .state import ServerState
from .tools import ForcedToolUse, ToolUse


async def stream_events(state: ServerState, stream: RequestStream, request_id: str, created: int, chat: bool,
                        include_usage: bool, continuous_usage: bool, echo: Echo | None = None,
                        tools: ToolUse | ForcedToolUse | None = None):
    """Server-sent events: a chunk per settled piece of text, the finish reason last, then ``[DONE]``.
    Usage as OpenAI sends it: with ``include_usage`` every chunk has ``usage: null`` and one more
    chunk, with empty ``choices``, carries the usage before ``[DONE]``; without it no chunk has a
    usage field. With ``continuous_usage`` (an extension, as vLLM's) every chunk carries the usage
    so far, and a chunk comes for every step that gave the request a token, text or not. With
    ``tools`` (chat) the text goes through the tool-call parser: content deltas, a ``tool_calls``
    delta per complete call, finish reason "tool_calls" when it found one (a forced named function's
    stays "stop"). Leaving early (the client went away) aborts the request.

    The events that are ready together go out as one piece of the body (one write): when the front
    end falls behind the engine, several steps' tokens wait, and a write of each step's event would
    cost it more than the events themselves."""
    events = _events(state, stream, request_id, created, chat, include_usage, continuous_usage, echo, tools)
    ready = []
    try:
        async for event in events:
            ready.append(event)
            if stream.waits:           # the next event waits for the engine: what is ready goes now
                yield "".join(ready)
                ready.clear()
        if ready:
            yield "".join(ready)
    finally:
        await events.aclose()


async def _events(state: ServerState, stream: RequestStream, request_id: str, created: int, chat: bool,
                  include_usage: bool, continuous_usage: bool, echo: Echo | None = None,
                  tools: ToolUse | ForcedToolUse | None = None):
    """stream_events' events, one at a time."""
    text = stream.text
    logprobs = logprobs_writer(state.tokenizer, stream.sampling, chat)
    deltas = tools.stream() if tools is not None else None
    kind = "chat.completion.chunk" if chat else "text_completion"

    def event(choices: list[dict], usage: dict | None = None) -> str:
        chunk = {"id": request_id, "object": kind, "created": created, "model": state.model_name, "choices": choices}
        if include_usage or continuous_usage:
            chunk["usage"] = usage
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    def choice(message: dict, reason: str | None, upto: int | None = None) -> dict:
        """A chunk's choice: a chat delta ``message`` ({"content": ...}, {"tool_calls": ...} or {}), or
        completions' text (``message["content"]``); the logprobs of the tokens up to ``upto``."""
        scores = logprobs.take(stream.output, stream.logprobs, upto) if logprobs else None
        if chat:
            return {"index": 0, "delta": message, "logprobs": scores, "finish_reason": reason}
        return {"index": 0, "text": message.get("content", ""), "logprobs": scores, "finish_reason": reason}

    def messages(delta: str, finished: bool) -> list[dict]:
        """The delta messages a piece of settled text makes (none: an empty one)."""
        if deltas is None:
            return [{"content": delta}] if delta else [{}]
        out = deltas.feed(delta) + (deltas.finish() if finished else [])
        return out or [{}]

    try:
        if chat:
            yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                          "finish_reason": None}])
        try:
            async for progress in stream.updates():
                if echo is not None:      # the prompt first (its logprobs arrive with the first token)
                    scores = logprobs.prompt(stream.prompt, stream.prompt_logprobs) if logprobs else None
                    yield event([{"index": 0, "text": echo.text, "logprobs": scores, "finish_reason": None}])
                    echo = None
                if progress.finished:
                    text.finish()
                pieces = messages(text.take(), progress.finished)
                if progress.finished:
                    seq = stream
                    reason = finish_reason(seq.finish_reason)
                    for piece in pieces[:-1]:
                        yield event([choice(piece, None)])
                    if deltas is not None:
                        tools.check(deltas.calls)
                        reason = tools.finish_reason(reason, bool(deltas.calls))
                    yield event([choice(pieces[-1], reason)], usage(seq) if continuous_usage else None)
                    if include_usage:
                        yield event([], usage(seq))
                elif continuous_usage:
                    for piece in pieces:
                        yield event([choice(piece, None, upto=progress.num_tokens)], usage(stream, progress.num_tokens))
                else:
                    for piece in pieces:
                        if piece or (logprobs and stream.logprobs):
                            yield event([choice(piece, None, upto=progress.num_tokens)])
        except APIError as error:
            yield f"data: {json.dumps(error.body())}\n\n"
        except EngineStoppedError as exc:
            error = APIError(503, str(exc), type="server_error")
            yield f"data: {json.dumps(error.body())}\n\n"
        except FailedRequestError as exc:
            error = APIError(500, str(exc), type="server_error", code="request_failed")
            yield f"data: {json.dumps(error.body())}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        state.engine.abort(stream)     # the client left early (or a no-op: it finished)
