"""A request's prompt as token ids, and its max_tokens within the model's context and the server's limits."""
from __future__ import annotations

import json

from anydev.core.loading.tokenizer import ChatTemplateError

from .protocol import APIError, ChatMessage, ChatRequest
from .state import ServerState


def check_model(state: ServerState, model: str) -> None:
    """A model this server does not serve is a 404 with code ``model_not_found`` (as OpenAI and vLLM answer)."""
    if model != state.model_name:
        raise APIError(404, f"the model '{model}' does not exist here; this server serves '{state.model_name}' "
                            "(GET /v1/models lists it)", param="model", code="model_not_found")


def tokenizer_of(state: ServerState):
    tokenizer = state.tokenizer
    if tokenizer is None:
        raise APIError(400, "this model has no tokenizer; send the prompt as a list of token ids", param="prompt")
    return tokenizer


def completion_prompts(state: ServerState, prompt) -> list[tuple[list[int], str | None]]:
    """Each prompt's token ids and, for one given as text, the text (what echo repeats)."""
    many = isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list))
    return [completion_prompt_ids(state, p, f"prompt.{i}" if many else "prompt")
            for i, p in enumerate(prompt if many else [prompt])]


def completion_prompt_ids(state: ServerState, prompt, param: str = "prompt") -> tuple[list[int], str | None]:
    """One prompt (text or token ids) as token ids, and its text when it was given as text."""
    if isinstance(prompt, str):
        return tokenizer_of(state).encode(valid_unicode(prompt, param), add_special_tokens=True), prompt
    vocab = state.engine.info.vocab_size
    if not all(0 <= t < vocab for t in prompt):
        raise APIError(400, f"prompt token ids must be in 0..{vocab - 1}", param=param)
    return list(prompt), None


def valid_unicode(text: str, param: str) -> str:
    """``text``, or a 400 when it holds lone surrogates (JSON escapes can carry them; UTF-8 cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise APIError(400, f"{param} is not valid Unicode: a lone surrogate at character {exc.start}",
                       param=param) from None
    return text


def chat_prompt_ids(state: ServerState, body: ChatRequest) -> list[int]:
    tokenizer = tokenizer_of(state)
    if not tokenizer.has_chat_template:
        raise APIError(400, "this model has no chat template; use /v1/completions", param="messages")
    messages = [template_message(m, i) for i, m in enumerate(body.messages)]
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools] if body.calls_tools else None
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=tools)
    except ChatTemplateError as exc:
        raise APIError(400, str(exc), param="messages") from exc
    return tokenizer.encode(text, add_special_tokens=False)


def template_message(message: ChatMessage, index: int) -> dict:
    """A message as chat templates read it (as HF's ``apply_chat_template`` takes it): a tool call's
    arguments as an object (templates write them with ``tojson``), a tool message's ``tool_call_id``."""
    out = {"role": message.role, "content": valid_unicode(message.text(), f"messages.{index}.content")}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = [{"id": call.id, "type": "function",
                              "function": {"name": call.function.name,
                                           "arguments": _arguments(call.function.arguments,
                                                                   f"messages.{index}.tool_calls.{j}")}}
                             for j, call in enumerate(message.tool_calls)]
    return out


def _arguments(text: str, where: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise APIError(400, f"{where}.function.arguments is not JSON: {exc}", param=f"{where}.function.arguments") \
            from None
    if not isinstance(value, dict):
        raise APIError(400, f"{where}.function.arguments must be a JSON object", param=f"{where}.function.arguments")
    return value


def max_tokens(state: ServerState, prompt_ids: list[int], requested: int | None) -> int:
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
