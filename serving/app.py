"""The OpenAI-compatible HTTP API over the engine core (FastAPI): the front end.

It tokenizes, hands token ids to the engine core through an :class:`AsyncEngine`, which turns the
token ids that come back into text (an :class:`~anydev.core.output.OutputText`: stop strings
included), and streams that text.

``/v1/completions`` and ``/v1/chat/completions`` (streamed as server-sent events or not), ``/v1/models``,
``/health`` and ``/metrics`` (Prometheus). Every bad request is answered with an OpenAI-style error
body and the server goes on serving; a client that disconnects has its request aborted.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from anydev.core import InferEngine
from anydev.core.loading.tokenizer import ChatTemplateError, Tokenizer
from anydev.core.output import OutputText

from .async_engine import (AsyncEngine, EngineStoppedError, FailedRequestError, InvalidRequestError, QueueFullError,
                           RequestStream)
from .limits import BodySizeLimit, ServerLimits
from .metrics import ServerMetrics
from .output import LogprobsWriter, best_answers, joined, merged_answer
from .protocol import APIError, ChatRequest, CompletionRequest, ErrorBody, describe_limits, finish_reason
from anydev.core.sched.sampling import MAX_SEED


@dataclass
class ServerState:
    engine: AsyncEngine
    tokenizer: Tokenizer | None
    metrics: ServerMetrics
    model_name: str
    limits: ServerLimits
    api_key: str | None


def create_app(engine: InferEngine | AsyncEngine, model_name: str, limits: ServerLimits | None = None,
               api_key: str | None = None, tokenizer: Tokenizer | None = None) -> FastAPI:
    """The app over an engine core's client (not connected yet: the app's lifespan connects it and,
    at shutdown, aborts what still runs and says goodbye), whose model's ``tokenizer`` it uses; or
    over an :class:`InferEngine` of this process, whose core then runs on a thread (the caller
    closes the engine)."""
    limits = limits or ServerLimits()
    if isinstance(engine, InferEngine):
        tokenizer = engine.checkpoint.tokenizer
        engine = AsyncEngine.unstarted_over(engine)
    metrics = ServerMetrics(engine)
    engine.observer = metrics
    state = ServerState(engine, tokenizer, metrics, model_name, limits, api_key)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await engine.connect()
        yield
        await engine.close()

    app = FastAPI(title="anydev", description="OpenAI-compatible API over the anydev engine", lifespan=lifespan)
    app.state.anydev = state
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)
    _add_error_handlers(app, metrics)
    _document_errors_as_answered(app, model_name, limits)
    # With a key, the schema declares the bearer scheme on exactly the routes that check it.
    authorized = [Depends(_authorize)] if api_key is not None else []
    denied = {401: _error("missing or wrong API key")} if api_key is not None else {}
    generating = {200: {"description": "the answer (JSON), or server-sent events with stream=true",
                        "content": {"text/event-stream": {}}},
                  400: _error("a bad request: the error names the parameter"), **denied,
                  413: _error("the body is over --max-body-bytes"),
                  429: _error("the waiting queue is full (--max-waiting); retry after Retry-After seconds"),
                  500: _error("this request failed while it ran (its sampling failed); the server serves on"),
                  503: _error("the server is shutting down or its engine failed")}

    @app.get("/health", responses={503: _error("the engine is not running")})
    async def health():
        if not state.engine.healthy:
            raise APIError(503, "the engine is not running" + (f": {state.engine.failure}" if state.engine.failure else ""),
                           type="server_error")
        return {"status": "ok"}

    metrics_key = limits.metrics_need_key and api_key is not None

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=authorized if metrics_key else [],
             responses=denied if metrics_key else {})
    async def prometheus_metrics():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", dependencies=authorized, responses=denied)
    async def models():
        return {"object": "list", "data": [_model_card(state)]}

    @app.post("/v1/completions", dependencies=authorized, responses=generating)
    async def completions(body: CompletionRequest, request: Request):
        body.check_unsupported()
        _check_model(state, body.model)
        prompts = _completion_prompts(state, body.prompt)
        if len(prompts) == 1:
            return await _serve(state, request, body, *prompts[0], body.max_tokens, chat=False)
        answers = await asyncio.gather(*(_serve(state, request, body, ids, text, body.max_tokens, chat=False)
                                         for ids, text in prompts), return_exceptions=True)
        failed = next((a for a in answers if isinstance(a, BaseException)), None)
        if failed is not None:
            raise failed
        return merged_answer(answers)

    @app.post("/v1/chat/completions", dependencies=authorized, responses=generating)
    async def chat_completions(body: ChatRequest, request: Request):
        body.check_unsupported()
        _check_model(state, body.model)
        prompt_ids = _chat_prompt_ids(state, body)
        if body.max_tokens is not None and body.max_completion_tokens is not None:
            _max_tokens(state, prompt_ids, body.max_tokens)     # both given: both within the limits
        return await _serve(state, request, body, prompt_ids, None, body.requested_max_tokens, chat=True)

    return app


def _error(description: str) -> dict:
    return {"model": ErrorBody, "description": description}


def _document_errors_as_answered(app: FastAPI, model_name: str, limits: ServerLimits) -> None:
    """The OpenAPI schema without FastAPI's 422 validation answer (this server answers 400 with the
    OpenAI error body instead), and with the served model id and the max_tokens limit."""
    generate = app.openapi
    vocab_size = app.state.anydev.engine.info.vocab_size

    def openapi() -> dict:
        schema = generate()
        describe_limits(schema, model_name, limits.max_tokens, vocab_size)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        return schema

    app.openapi = openapi


# ---- access ------------------------------------------------------------------------------------
_bearer = HTTPBearer(auto_error=False, description="the server's API key (--api-key or ANYDEV_API_KEY)")


async def _authorize(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """A 401 unless the request carries ``Authorization: Bearer <the key>``; the key is compared in
    constant time (hmac.compare_digest), and neither it nor what was sent is ever logged."""
    key: str = request.app.state.anydev.api_key
    sent = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(sent.encode(), key.encode()):
        raise APIError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                       type="authentication_error", code="invalid_api_key")


# ---- prompts -------------------------------------------------------------------------------------
def _model_card(state: ServerState) -> dict:
    return {"id": state.model_name, "object": "model", "created": 0, "owned_by": "anydev",
            "max_model_len": state.engine.info.max_model_len}


def _check_model(state: ServerState, model: str) -> None:
    if model != state.model_name:
        raise APIError(400, f"model '{model}' is not served here; this server serves '{state.model_name}'",
                       param="model", code="model_not_found")


def _tokenizer(state: ServerState):
    tokenizer = state.tokenizer
    if tokenizer is None:
        raise APIError(400, "this model has no tokenizer; send the prompt as a list of token ids", param="prompt")
    return tokenizer


def _completion_prompts(state: ServerState, prompt) -> list[tuple[list[int], str | None]]:
    """Each prompt's token ids and, for one given as text, the text (what echo repeats)."""
    many = isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list))
    return [_completion_prompt_ids(state, p, f"prompt.{i}" if many else "prompt")
            for i, p in enumerate(prompt if many else [prompt])]


def _completion_prompt_ids(state: ServerState, prompt, param: str) -> tuple[list[int], str | None]:
    if isinstance(prompt, str):
        return _tokenizer(state).encode(_unicode(prompt, param), add_special_tokens=True), prompt
    vocab = state.engine.info.vocab_size
    if not all(0 <= t < vocab for t in prompt):
        raise APIError(400, f"prompt token ids must be in 0..{vocab - 1}", param=param)
    return list(prompt), None


def _unicode(text: str, param: str) -> str:
    """``text``, or a 400 when it holds lone surrogates (JSON escapes can carry them; UTF-8 cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise APIError(400, f"{param} is not valid Unicode: a lone surrogate at character {exc.start}",
                       param=param) from None
    return text


def _chat_prompt_ids(state: ServerState, body: ChatRequest) -> list[int]:
    tokenizer = _tokenizer(state)
    if not tokenizer.has_chat_template:
        raise APIError(400, "this model has no chat template; use /v1/completions", param="messages")
    messages = [{"role": m.role, "content": _unicode(m.text(), f"messages.{i}.content")}
                for i, m in enumerate(body.messages)]
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    except ChatTemplateError as exc:
        raise APIError(400, str(exc), param="messages") from exc
    return tokenizer.encode(text, add_special_tokens=False)


def _max_tokens(state: ServerState, prompt_ids: list[int], requested: int | None) -> int:
    context, limits = state.engine.info.max_model_len, state.limits
    if not prompt_ids:
        raise APIError(400, "the prompt is empty", param="prompt")
    if len(prompt_ids) > limits.max_prompt_tokens:
        raise APIError(400, f"the prompt has {len(prompt_ids)} tokens; the limit is {limits.max_prompt_tokens} "
                            f"(--max-prompt-tokens)", param="prompt", code="prompt_too_long")
    room = context - len(prompt_ids)
    if room < 1:
        raise APIError(400, f"the prompt has {len(prompt_ids)} tokens, which fills the model's context of "
                            f"{context} tokens", param="prompt", code="context_length_exceeded")
    if requested is None:
        return min(room, limits.max_tokens)
    if requested > limits.max_tokens:
        raise APIError(400, f"max_tokens {requested} is above this server's limit of {limits.max_tokens} "
                            f"(--max-tokens-limit)", param="max_tokens")
    if requested > room:
        raise APIError(400, f"max_tokens {requested} plus the prompt's {len(prompt_ids)} tokens exceeds the "
                            f"model's context of {context} tokens", param="max_tokens",
                       code="context_length_exceeded")
    return requested


# ---- running a request --------------------------------------------------------------------------
async def _serve(state: ServerState, request: Request, body, prompt_ids: list[int], prompt_text: str | None,
                 requested: int | None, chat: bool):
    """One prompt's answer. Completions with ``echo`` repeat the prompt (``prompt_text``, or its decode)
    and its logprobs first; ``max_tokens`` 0 scores the prompt: one token runs and is not answered."""
    max_tokens = _max_tokens(state, prompt_ids, requested)
    sampling = body.sampling(max(max_tokens, 1))
    vocab = state.engine.info.vocab_size
    if sampling.logit_bias and max(sampling.logit_bias) >= vocab:
        raise APIError(400, f"logit_bias names token {max(sampling.logit_bias)}; token ids are 0..{vocab - 1}",
                       param="logit_bias")
    echo = None
    if not chat and body.echo:
        echo = _Echo(prompt_text if prompt_text is not None else _prompt_text(state, prompt_ids), max_tokens == 0)
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
    request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    created = int(time.time())
    if samples > 1:        # not streamed (the protocol's check)
        answers = await asyncio.gather(*(_whole_answer(state, request, s, request_id, created, chat, echo)
                                         for s in streams), return_exceptions=True)
        failed = next((a for a in answers if isinstance(a, BaseException)), None)
        if failed is not None:
            for stream in streams:
                state.engine.abort(stream)
            raise failed
        return best_answers(answers, [s.logprobs for s in streams], body.n, keep_logprobs=body.logprobs_asked is not None)
    stream = streams[0]
    if body.stream:
        options = body.stream_options
        events = _stream_events(state, stream, request_id, created, chat, bool(options and options.include_usage),
                                bool(options and options.continuous_usage_stats), echo)
        return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    return await _whole_answer(state, request, stream, request_id, created, chat, echo)


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
    except FailedRequestError as exc:
        raise APIError(500, str(exc), type="server_error", code="request_failed") from exc
    except QueueFullError as exc:
        raise APIError(429, str(exc), type="rate_limit_error", code="queue_full",
                       headers={"Retry-After": str(state.limits.retry_after_seconds)}) from exc
    except EngineStoppedError as exc:
        raise APIError(503, str(exc), type="server_error") from exc
    except InvalidRequestError as exc:
        raise APIError(400, str(exc), param="prompt") from exc


@dataclass
class _Echo:
    """A completions answer that repeats its prompt (``text``); ``only``: it answers the prompt alone."""

    text: str
    only: bool


def _prompt_text(state: ServerState, ids: list[int]) -> str:
    return state.tokenizer.decode(ids, skip_special_tokens=False) if state.tokenizer is not None else ""


async def _whole_answer(state: ServerState, request: Request, stream: RequestStream, request_id: str,
                        created: int, chat: bool, echo: _Echo | None = None) -> dict:
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
    logprobs = _logprobs_writer(state, stream, chat)
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
            "model": state.model_name, "choices": [choice], "usage": _usage(seq, 0 if echo and echo.only else None)}


async def _collect(stream: RequestStream) -> None:
    async for _ in stream.updates():
        pass


async def _stream_events(state: ServerState, stream: RequestStream, request_id: str, created: int, chat: bool,
                         include_usage: bool, continuous_usage: bool, echo: _Echo | None = None):
    """Server-sent events: a chunk per settled piece of text, the finish reason (with usage) last,
    then ``[DONE]``; with ``continuous_usage`` a chunk (with usage) for every step that gave the
    request a token, text or not. Leaving early (the client went away) aborts the request."""
    text = stream.text
    logprobs = _logprobs_writer(state, stream, chat)
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
                    yield event([choice(delta, finish_reason(seq.finish_reason))], _usage(seq))
                    if include_usage:
                        yield event([], _usage(seq))
                elif continuous_usage:
                    yield event([choice(delta, None, upto=progress.num_tokens)], _usage(stream, progress.num_tokens))
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


def _logprobs_writer(state: ServerState, stream: RequestStream, chat: bool) -> LogprobsWriter | None:
    return LogprobsWriter(state.tokenizer, chat) if stream.sampling.logprobs is not None else None


def _usage(seq, num_tokens: int | None = None) -> dict:
    done = len(seq.output) if num_tokens is None else num_tokens
    return {"prompt_tokens": len(seq.prompt), "completion_tokens": done, "total_tokens": len(seq.prompt) + done}


# ---- errors ----------------------------------------------------------------------------------------
def _add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    def answer(error: APIError) -> JSONResponse:
        metrics.rejected.labels(str(error.status)).inc()
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return answer(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        location = [str(part) for part in first.get("loc", ()) if part != "body"]
        param = ".".join(location) or None
        if first.get("type") == "json_invalid":
            message, param = "the request body is not valid JSON", None
        else:
            message = f"{param or 'body'}: {first.get('msg', 'invalid value')}"
        return answer(APIError(400, message, param=param))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):   # a bug: said as such, in the API's shape
        return answer(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return answer(APIError(exc.status_code, str(exc.detail), type=kind, headers=exc.headers))   # 405: Allow
