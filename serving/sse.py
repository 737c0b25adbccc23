"""Server-sent events of a streamed request: a chunk per settled piece of text, the finish reason, then [DONE]."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from .async_engine import EngineStoppedError, FailedRequestError, RequestStream
from .errors import engine_error
from .output import Echo, logprobs_writer
from .protocol import APIError, finish_reason, usage
from .state import ServerState
from .tools import ForcedToolUse, ToolUse


@dataclass
class Choice:
    """One choice of a streamed answer: its ``index`` in the chunks, the request that makes it, what it
    repeats of its prompt first (completions' ``echo``), and which of the request's prompts it answers
    (``n`` samples of one prompt count it once in the usage)."""

    index: int
    stream: RequestStream
    echo: Echo | None = None
    prompt: int = 0


async def stream_events(state: ServerState, choices: list[Choice], request_id: str, created: int, chat: bool,
                        include_usage: bool, continuous_usage: bool, tools: ToolUse | ForcedToolUse | None = None):
    """Server-sent events: a chunk per settled piece of a choice's text, its finish reason last, then
    ``[DONE]`` once every choice has finished. Several choices (``n``, or several prompts) interleave as
    their tokens come, each chunk naming its choice's index. Usage as OpenAI sends it: with
    ``include_usage`` every chunk has ``usage: null`` and one more chunk, with empty ``choices``,
    carries the usage of the whole request (each prompt counted once) before ``[DONE]``; without it no
    chunk has a usage field. With ``continuous_usage`` (an extension, as vLLM's) every chunk carries
    the usage of its choice so far, and a chunk comes for every step that gave the request a token,
    text or not. With ``tools`` (chat) each choice's text goes through a tool-call parser of its own:
    content deltas, a ``tool_calls`` delta per complete call, finish reason "tool_calls" when it found
    one (a forced named function's stays "stop"). An error ends the answer with an error event and
    ``[DONE]``, and aborts every choice's request; so does the client leaving early.

    The events that are ready together go out as one piece of the body (one write): when the front
    end falls behind the engine, several steps' tokens wait, and a write of each step's event would
    cost it more than the events themselves."""
    usage_field = include_usage or continuous_usage
    parts = [_events(state, c, request_id, created, chat, usage_field, continuous_usage, tools) for c in choices]
    merged = _interleaved(parts) if len(parts) > 1 else None
    ready = []
    try:
        try:
            if merged is None:
                async for event in parts[0]:
                    ready.append(event)
                    if choices[0].stream.waits:    # the next event waits for the engine: what is ready goes now
                        yield "".join(ready)
                        ready.clear()
            else:
                async for batch in merged:
                    ready.extend(batch)
                    yield "".join(ready)
                    ready.clear()
            if include_usage:
                ready.append(_chunk(state, request_id, created, chat, [], _total_usage(choices), usage_field))
        except (APIError, EngineStoppedError, FailedRequestError) as exc:
            error = exc if isinstance(exc, APIError) else engine_error(exc)
            ready.append(f"data: {json.dumps(error.body())}\n\n")
        ready.append("data: [DONE]\n\n")
        yield "".join(ready)
    finally:
        if merged is not None:
            await merged.aclose()       # its tasks stopped first: a generator one of them runs cannot close
        for part in parts:
            await part.aclose()
        for choice in choices:
            state.engine.abort(choice.stream)     # the client left early, an error (or a no-op: it finished)


async def _interleaved(parts: list):
    """The events of several generators as they come: each time, every event ready by then (a list).
    The first error of any is raised once the events before it are out."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(part):
        try:
            async for event in part:
                queue.put_nowait(event)
        except Exception as exc:          # handed to the reader, which raises it (a cancel ends the pump)
            queue.put_nowait(exc)
            return
        queue.put_nowait(None)

    tasks = [asyncio.ensure_future(pump(part)) for part in parts]
    try:
        running = len(tasks)
        while running:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            events = []
            for item in batch:
                if item is None:
                    running -= 1
                elif isinstance(item, BaseException):
                    if events:
                        yield events
                    raise item
                else:
                    events.append(item)
            if events:
                yield events
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _total_usage(choices: list[Choice]) -> dict:
    """The usage of a whole request: each prompt once (its samples share it), every choice's output."""
    prompts = {c.prompt: len(c.stream.prompt) for c in choices}
    prompt, done = sum(prompts.values()), sum(len(c.stream.output) for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def _chunk(state: ServerState, request_id: str, created: int, chat: bool, choices: list[dict], usage: dict | None,
           usage_field: bool) -> str:
    chunk = {"id": request_id, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
             "model": state.model_name, "choices": choices}
    if usage_field:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"


async def _events(state: ServerState, one: Choice, request_id: str, created: int, chat: bool, usage_field: bool,
                  continuous_usage: bool, tools: ToolUse | ForcedToolUse | None = None):
    """One choice's events for stream_events, one at a time, up to its finish reason; its errors raised."""
    stream, echo, index = one.stream, one.echo, one.index
    text = stream.text
    logprobs = logprobs_writer(state.tokenizer, stream.sampling, chat)
    deltas = tools.stream() if tools is not None else None

    def event(choices: list[dict], usage: dict | None = None) -> str:
        return _chunk(state, request_id, created, chat, choices, usage, usage_field)

    def choice(message: dict, reason: str | None, upto: int | None = None) -> dict:
        """A chunk's choice: a chat delta ``message`` ({"content": ...}, {"tool_calls": ...} or {}), or
        completions' text (``message["content"]``); the logprobs of the tokens up to ``upto``."""
        scores = logprobs.take(stream.output, stream.logprobs, upto) if logprobs else None
        if chat:
            return {"index": index, "delta": message, "logprobs": scores, "finish_reason": reason}
        return {"index": index, "text": message.get("content", ""), "logprobs": scores, "finish_reason": reason}

    def messages(delta: str, finished: bool) -> list[dict]:
        """The delta messages a piece of settled text makes (none: an empty one)."""
        if deltas is None:
            return [{"content": delta}] if delta else [{}]
        out = deltas.feed(delta) + (deltas.finish() if finished else [])
        return out or [{}]

    if chat:
        yield event([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                      "finish_reason": None}])
    async for progress in stream.updates():
        if echo is not None:      # the prompt first (its logprobs arrive with the first token)
            scores = logprobs.prompt(stream.prompt, stream.prompt_logprobs) if logprobs else None
            yield event([{"index": index, "text": echo.text, "logprobs": scores, "finish_reason": None}])
            echo = None
        if progress.finished:
            text.finish()
        pieces = messages(text.take(), progress.finished)
        if progress.finished:
            reason = finish_reason(stream.finish_reason)
            for piece in pieces[:-1]:
                yield event([choice(piece, None)])
            if deltas is not None:
                tools.check(deltas.calls)
                reason = tools.finish_reason(reason, bool(deltas.calls))
            yield event([choice(pieces[-1], reason)], usage(stream) if continuous_usage else None)
        elif continuous_usage:
            for piece in pieces:
                yield event([choice(piece, None, upto=progress.num_tokens)], usage(stream, progress.num_tokens))
        else:
            for piece in pieces:
                if piece or (logprobs and stream.logprobs):
                    yield event([choice(piece, None, upto=progress.num_tokens)])
