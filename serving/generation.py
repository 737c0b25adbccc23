"""Running one request: handed to the engine core, then answered whole or streamed as server-sent events."""
from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import StreamingResponse

from anydev.core.output import OutputText
from anydev.core.sched.sampling_params import MAX_SEED

from .async_engine import EngineStoppedError, FailedRequestError, InvalidRequestError, QueueFullError, RequestStream
from .errors import engine_error
from .output import Echo, best_answers, joined, logprobs_writer, prompt_text
from .prompts import max_tokens
from .protocol import APIError, finish_reason, usage
from .sse import Choice, stream_events
from .state import ServerState
from .tools import ForcedToolUse, ToolUse


@dataclass
class Started:
    """One prompt's requests, running: its ``streams`` (``samples`` of them: ``n``, or ``best_of``) and
    what its answer repeats of the prompt (completions' ``echo``)."""

    streams: list[RequestStream]
    echo: Echo | None


async def serve(state: ServerState, request: Request, body, prompt_ids: list[int], prompt: str | None,
                requested: int | None, chat: bool, tools: ToolUse | ForcedToolUse | None = None):
    """One prompt's answer, whole or streamed. Completions with ``echo`` repeat the prompt (its text
    ``prompt``, or its decode) and its logprobs first; ``max_tokens`` 0 scores the prompt: one token
    runs and is not answered. ``tools`` (chat): the answer is read for tool calls."""
    started = await start(state, body, prompt_ids, prompt, requested, chat, tools)
    request_id, created = new_request_id(chat), int(time.time())
    if body.stream:
        return streamed_answer(state, body, [started], request_id, created, chat, tools)
    streams = started.streams
    if len(streams) == 1:
        return await whole_answer(state, request, streams[0], request_id, created, chat, started.echo, tools)
    answers = await asyncio.gather(*(whole_answer(state, request, s, request_id, created, chat, started.echo, tools)
                                     for s in streams), return_exceptions=True)
    failed = next((a for a in answers if isinstance(a, BaseException)), None)
    if failed is not None:
        abort_all(state, [started])
        raise failed
    return best_answers(answers, [s.logprobs for s in streams], body.n, keep_logprobs=body.logprobs_asked is not None)


async def start(state: ServerState, body, prompt_ids: list[int], prompt: str | None, requested: int | None,
                chat: bool, tools: ToolUse | ForcedToolUse | None = None) -> Started:
    """``prompt_ids``' requests handed to the engine core: the first, then, once the prompt is computed,
    the other samples (their own seeds). An error is raised as the API's answer, with nothing left running."""
    limit = max_tokens(state, prompt_ids, requested)
    sampling = body.sampling(max(limit, 1))
    if tools is not None and tools.grammar is not None:
        sampling.structured = tools.grammar          # tool_choice required or named, enforced
    vocab = state.engine.info.vocab_size
    if sampling.logit_bias and max(sampling.logit_bias) >= vocab:
        raise APIError(400, f"logit_bias names token {max(sampling.logit_bias)}; token ids are 0..{vocab - 1}",
                       param="logit_bias")
    echo = None
    if not chat and body.echo:
        echo = Echo(prompt if prompt is not None else prompt_text(state.tokenizer, prompt_ids), limit == 0)
    samples = body.samples
    if samples > body.n and sampling.logprobs is None:
        sampling.logprobs = 0          # best_of ranks its samples by their logprobs
    streams = []
    try:
        streams.append(await _add_request(state, prompt_ids, sampling))
        if samples > 1:
            # The others start once the prompt is computed: its full KV blocks are in the prefix cache
            # then, and every sample shares them (it computes only the prompt's last partial block).
            await streams[0].first_token()
            for i in range(1, samples):
                streams.append(await _add_request(state, prompt_ids, _sibling(sampling, i)))
    except BaseException as exc:
        for stream in streams:
            state.engine.abort(stream)
        _raise_as_api_error(state, exc)
    return Started(streams, echo)


def streamed_answer(state: ServerState, body, started: list[Started], request_id: str, created: int, chat: bool,
                    tools: ToolUse | ForcedToolUse | None = None) -> StreamingResponse:
    """The server-sent events of every stream of ``started`` (one request's prompts, in order), choice
    ``index`` counting through the prompts' samples as OpenAI numbers them."""
    options = body.stream_options
    pairs = [(prompt, one, stream) for prompt, one in enumerate(started) for stream in one.streams]
    choices = [Choice(index, stream, one.echo, prompt) for index, (prompt, one, stream) in enumerate(pairs)]
    events = stream_events(state, choices, request_id, created, chat, bool(options and options.include_usage),
                           bool(options and options.continuous_usage_stats), tools)
    return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def new_request_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"


def abort_all(state: ServerState, started: list[Started]) -> None:
    for one in started:
        for stream in one.streams:
            state.engine.abort(stream)


async def _add_request(state: ServerState, prompt_ids: list[int], sampling) -> RequestStream:
    return await state.engine.add_request(prompt_ids, sampling, max_waiting=state.limits.max_waiting,
                                          timeout=state.limits.request_timeout,
                                          text=OutputText(state.tokenizer, sampling.stop))


def _sibling(sampling, i: int):
    """Sample ``i`` of a request's n: its own seed (the request's + i), so that n samples with a seed
    are reproducible and differ."""
    seed = None if sampling.seed is None else (sampling.seed + i) % (MAX_SEED + 1)
    return dataclasses.replace(sampling, seed=seed)


def _raise_as_api_error(state: ServerState, error: BaseException):
    """``error`` (of adding a request) raised again as the API's answer to it."""
    try:
        raise error
    except (EngineStoppedError, FailedRequestError) as exc:
        raise engine_error(exc) from exc
    except QueueFullError as exc:
        raise APIError(429, str(exc), type="rate_limit_error", code="queue_full",
                       headers={"Retry-After": str(state.limits.retry_after_seconds)}) from exc
    except InvalidRequestError as exc:
        raise APIError(400, str(exc), param="prompt") from exc


async def whole_answer(state: ServerState, request: Request, stream: RequestStream, request_id: str,
                       created: int, chat: bool, echo: Echo | None = None,
                       tools: ToolUse | ForcedToolUse | None = None) -> dict:
    collected = asyncio.ensure_future(_collect(stream))
    try:
        while not collected.done():
            done, _ = await asyncio.wait({collected}, timeout=0.5)
            if not done and await request.is_disconnected():
                collected.cancel()
                raise APIError(499, "the client disconnected")
        collected.result()
    except (EngineStoppedError, FailedRequestError) as exc:
        raise engine_error(exc) from exc
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
        choice["message"] = tools.message(content) if tools is not None else {"role": "assistant", "content": content}
        if tools is not None:
            choice["finish_reason"] = tools.finish_reason(choice["finish_reason"], "tool_calls" in choice["message"])
    else:
        choice["text"] = content
    return {"id": request_id, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": state.model_name, "choices": [choice],
            "usage": usage(seq, 0 if echo and echo.only else None)}


async def _collect(stream: RequestStream) -> None:
    async for _ in stream.updates():
        pass
