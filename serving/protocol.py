"""The OpenAI request bodies the server accepts, their checks, and the error body it answers with.

Fields the OpenAI API has but anydev does not implement are accepted only at their neutral value
(no suffix); anything else is a 400 naming the field, never silently ignored. Structured output:
``response_format`` and vLLM's ``structured_outputs`` (``structured_bodies.py``). Tools: ``tools``,
``tool_choice``, ``parallel_tool_calls``, the ``tool`` role and an assistant's ``tool_calls``; a tool-call parser reads the answer (``serving/tools``). ``top_k``, ``min_p``, ``repetition_penalty`` and ``ignore_eos`` are accepted as extensions
(as vLLM does). Logprobs: chat's
``logprobs`` + ``top_logprobs`` (0..20), completions' ``logprobs`` N (0..20, OpenAI's limit is 5).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from anydev.core import SamplingParams
from anydev.core.sched.token_logprobs import MAX_LOGPROBS
from anydev.core.sched.sampling_params import MAX_SEED

from .structured_bodies import BadStructuredOutput, ResponseFormat, StructuredOutputs, structured_output
from .tool_bodies import NamedToolChoice, Tool, ToolCall


#: The most prompts one completions request may carry (a list of strings or of token-id lists).
MAX_PROMPTS = 64
#: The most answers one request may sample (``n``, ``best_of``).
MAX_SAMPLES = 16
#: The most tools one chat request may offer (OpenAI's limit).
MAX_TOOLS = 128


class APIError(Exception):
    """An HTTP error with the OpenAI error body ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _only(*values) -> dict:
    """The OpenAPI schema's note that a field is accepted only at these values."""
    return {"enum": list(values)}


def describe_limits(schema: dict, model_name: str, max_tokens: int, vocab_size: int) -> None:
    """Put the server's own limits into the OpenAPI ``schema`` (in place): the one model id it
    serves, the largest ``max_tokens``, the most prompts per request and the token ids' range, so that
    what the schema calls valid is what it accepts."""
    bodies = schema.get("components", {}).get("schemas", {})
    for option in bodies.get("CompletionRequest", {}).get("properties", {}).get("prompt", {}).get("anyOf", []):
        items = option.get("items", {})
        if items.get("type") == "integer":
            items.update(minimum=0, maximum=vocab_size - 1)
            option["minItems"] = 1
        elif items.get("type") == "string":
            option.update(minItems=1, maxItems=MAX_PROMPTS)
        elif items.get("type") == "array":      # a list of token-id lists
            items.setdefault("items", {}).update(minimum=0, maximum=vocab_size - 1)
            items["minItems"] = 1
            option.update(minItems=1, maxItems=MAX_PROMPTS)
    for name, fields in (("CompletionRequest", ("max_tokens",)),
                         ("ChatRequest", ("max_tokens", "max_completion_tokens"))):
        properties = bodies.get(name, {}).get("properties", {})
        if "model" in properties:
            properties["model"]["enum"] = [model_name]
        for field in fields:
            for option in properties.get(field, {}).get("anyOf", []):
                if option.get("type") == "integer":
                    option["maximum"] = max_tokens


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    """Every error answer's body (the OpenAPI schema documents it for each error status)."""

    error: ErrorDetail


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)   # strict: no 0 for false, no "1" for 1
    include_usage: bool = False
    continuous_usage_stats: bool = False   # extension (as vLLM): usage on every chunk, one chunk per step


_UNREAD = object()


class _Sampling(BaseModel):
    """The fields both endpoints share."""

    model_config = ConfigDict(extra="forbid", strict=True)   # strict: no 0 for false, no "1" for 1
    model: str
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)                  # extension; 0 or -1: off
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False                      # extension, for benchmarks
    n: int = Field(1, ge=1, le=MAX_SAMPLES, description="answers to sample for the prompt (streamed: their chunks interleave, each naming its index)")
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, ge=0.1, le=10.0)   # extension (HF's, as vLLM accepts it)
    min_p: float = Field(0.0, ge=0.0, le=1.0)                  # extension (as vLLM)
    logit_bias: dict[str, float] | None = Field(None, description="token id (as a string) -> bias in [-100, 100]")
    response_format: ResponseFormat | None = Field(None, description="text, json_object or json_schema: the "
                                                                     "answer follows it (a token mask per step)")
    structured_outputs: StructuredOutputs | None = Field(None, description="extension (vLLM's): one of json, regex, "
                                                                           "choice, grammar, json_object")
    user: str | None = None                       # accepted; unused
    _structured: object = PrivateAttr(default_factory=lambda: _UNREAD)

    def check_unsupported(self) -> None:
        for key, value in (self.logit_bias or {}).items():
            if not key.isdigit() or not -100 <= value <= 100:
                raise APIError(400, f"logit_bias maps token ids (strings of digits) to biases in [-100, 100]; "
                                    f"got {key!r}: {value!r}", param="logit_bias")
        if self.samples > self.n and self.stream:      # its best answers are known only at the end
            raise APIError(400, "best_of > n is not streamed; send stream=false, or best_of equal to n",
                           param="best_of", code="unsupported_parameter")
        stops = self.stop_list()
        if len(stops) > 4 or not all(stops):
            raise APIError(400, "'stop' takes at most 4 non-empty strings", param="stop")
        self.structured()

    def structured(self):
        """The request's :class:`StructuredOutput` (None: none), or a 400 naming the field (checked once)."""
        if self._structured is _UNREAD:
            try:
                self._structured = structured_output(self.response_format, self.structured_outputs)
            except BadStructuredOutput as exc:
                raise APIError(400, exc.message, param=exc.param, code=exc.code) from None
        return self._structured

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def sampling(self, max_tokens: int) -> SamplingParams:
        return SamplingParams(max_new_tokens=max_tokens, temperature=self.temperature,
                              top_k=max(self.top_k, 0), top_p=self.top_p, seed=self.seed,
                              stop=self.stop_list(), ignore_eos=self.ignore_eos, logprobs=self.logprobs_asked,
                              min_p=self.min_p, presence_penalty=self.presence_penalty,
                              frequency_penalty=self.frequency_penalty, repetition_penalty=self.repetition_penalty,
                              logit_bias={int(k): v for k, v in self.logit_bias.items()} if self.logit_bias else None,
                              structured=self.structured())

    @property
    def logprobs_asked(self) -> int | None:
        """How many alternatives each output token's logprobs list (None: no logprobs)."""
        return None

    @property
    def samples(self) -> int:
        """How many answers run for the prompt (``best_of`` of them, the best ``n`` returned)."""
        return self.n




class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=0, description="0 with echo: score the prompt, generate nothing")
    echo: bool = Field(False, description="the prompt before the answer (with logprobs: the prompt's too)")
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                 description="each output token's logprob and this many likeliest tokens' (0..20)")
    best_of: int | None = Field(None, ge=1, le=MAX_SAMPLES,
                                description="samples to run, the n with the highest summed logprob returned")
    suffix: str | None = Field(None, json_schema_extra=_only(None))

    @property
    def logprobs_asked(self) -> int | None:
        return self.logprobs

    def sampling(self, max_tokens: int) -> SamplingParams:
        params = super().sampling(max_tokens)
        params.prompt_logprobs = self.logprobs if self.echo else None
        return params

    @property
    def samples(self) -> int:
        return max(self.n, self.best_of or 1)

    @property
    def num_prompts(self) -> int:
        batched = isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], (str, list))
        return len(self.prompt) if batched else 1

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.suffix is not None:
            raise APIError(400, "'suffix' is not supported by this server", param="suffix",
                           code="unsupported_parameter")
        if self.best_of is not None and self.best_of < self.n:
            raise APIError(400, f"best_of ({self.best_of}) must be at least n ({self.n})", param="best_of")
        if self.max_tokens == 0 and not self.echo:
            raise APIError(400, "max_tokens 0 scores the prompt and needs echo=true", param="max_tokens")
        if self.max_tokens == 0 and self.stream:
            raise APIError(400, "max_tokens 0 (scoring a prompt) is not streamed; send stream=false",
                           param="max_tokens", code="unsupported_parameter")
        if self.num_prompts > MAX_PROMPTS:
            raise APIError(400, f"at most {MAX_PROMPTS} prompts per request", param="prompt")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)   # strict: no 0 for false, no "1" for 1
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)   # strict: no 0 for false, no "1" for 1
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[TextPart] | None = Field(None, description="may be null only in an assistant message "
                                                                   "with tool_calls")
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(None, description="assistant messages only")
    tool_call_id: str | None = Field(None, description="tool messages only: the call this message answers")

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)

    def check(self, index: int) -> None:
        """A 400 naming the field when the message's fields do not fit its role."""
        where = f"messages.{index}"
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise APIError(400, f"{where}: content is required (null only in an assistant message with "
                                f"tool_calls)", param=f"{where}.content")
        if self.tool_calls is not None and self.role != "assistant":
            raise APIError(400, f"{where}: only assistant messages have tool_calls", param=f"{where}.tool_calls")
        if self.role == "tool" and self.tool_call_id is None:
            raise APIError(400, f"{where}: a tool message needs tool_call_id (the call it answers)",
                           param=f"{where}.tool_call_id")
        if self.role != "tool" and self.tool_call_id is not None:
            raise APIError(400, f"{where}: only tool messages have tool_call_id", param=f"{where}.tool_call_id")


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = Field(False, description="return each output token's logprob")
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                     description="with logprobs: this many likeliest tokens per position (0..20)")
    tools: list[Tool] | None = Field(None, max_length=MAX_TOOLS,
                                     description="functions the model may call (needs --tool-call-parser)")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="none, auto (the default with tools), required, or one named function; required and "
                          "named are enforced by a grammar where the server has llguidance, else asked of the "
                          "model through its prompt only")
    parallel_tool_calls: bool | None = Field(None, description="false: the answer keeps its first call only")

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.top_logprobs is not None and not self.logprobs:
            raise APIError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        for i, message in enumerate(self.messages):
            message.check(i)
        if self.calls_tools and self.structured() is not None:
            raise APIError(400, "tools and a structured output are not served together; send one of them",
                           param="response_format" if self.structured_outputs is None else "structured_outputs",
                           code="unsupported_parameter")
        names = [tool.function.name for tool in self.tools or []]
        if len(set(names)) != len(names):
            raise APIError(400, "two tools have the same name", param="tools")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise APIError(400, "tool_choice needs tools", param="tool_choice")
        if isinstance(self.tool_choice, NamedToolChoice) and self.tool_choice.function.name not in names:
            raise APIError(400, f"tool_choice names '{self.tool_choice.function.name}', which is not in tools",
                           param="tool_choice")

    @property
    def calls_tools(self) -> bool:
        """Whether the model is offered the tools and its answer read for calls (tools, and a choice but none)."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def required_tool(self) -> str | None:
        """The function a named tool_choice asks for, "" for required (any), None when the answer may be text."""
        if isinstance(self.tool_choice, NamedToolChoice):
            return self.tool_choice.function.name
        return "" if self.tool_choice == "required" and self.tools else None

    @property
    def logprobs_asked(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def finish_reason(engine_reason: str | None) -> str | None:
    """The OpenAI finish reason for the engine's."""
    return {"eos": "stop", "stop": "stop", "length": "length"}.get(engine_reason, engine_reason)


def usage(seq, num_tokens: int | None = None) -> dict:
    """The OpenAI usage object of ``seq``: its prompt and output tokens (the first ``num_tokens`` of them)."""
    done = len(seq.output) if num_tokens is None else num_tokens
    return {"prompt_tokens": len(seq.prompt), "completion_tokens": done, "total_tokens": len(seq.prompt) + done}
