"""Tokenizer: a ``tokenizers.Tokenizer`` plus the special tokens and chat template of the model.

Chat templates are rendered the way HF transformers renders them (a sandboxed jinja2 environment with
``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension, ``raise_exception``,
``strftime_now`` and a ``tojson`` filter; the special tokens as variables), so prompts match HF's.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property

import jinja2
import jinja2.ext
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ...plugin_api.errors import AnydevError


class ChatTemplateError(AnydevError, ValueError):
    """The chat template rejected the messages (it called ``raise_exception``) or failed to render."""


class InvalidTextError(AnydevError, ValueError):
    """Text that cannot be tokenized: it is not valid UTF-8 (e.g. undecodable command-line bytes)."""


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def compile_chat_template(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


class Tokenizer:
    """Text ↔ token ids for one model.

    ``special_tokens`` maps HF names ("bos_token", "eos_token", "unk_token", "pad_token") to token
    strings; they are the template's variables. BOS/EOS insertion on ``encode`` is the backend's
    post-processor's job (as in HF fast tokenizers), so ``backend`` must already carry it.
    """

    def __init__(self, backend: tokenizers.Tokenizer, *, chat_template: str | None = None,
                 special_tokens: dict[str, str | None] | None = None,
                 bos_token_id: int | None = None, eos_token_ids: list[int] | None = None):
        self.backend = backend
        self.chat_template = chat_template
        self.special_tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        self.bos_token_id = bos_token_id
        self.eos_token_ids = list(eos_token_ids or [])

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise InvalidTextError(f"the text is not valid UTF-8 (it holds {text[err.start]!r}, an undecodable "
                                       "byte or a lone surrogate); give it as UTF-8") from None
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_prompt(self, prompt: str, use_chat_template: bool = True) -> list[int]:
        """A user prompt's token ids: rendered through the chat template (which writes the BOS) when
        the model has one and ``use_chat_template`` is true, else encoded as plain text."""
        if use_chat_template and self.has_chat_template:
            text = self.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
            return self.encode(text, add_special_tokens=False)
        return self.encode(prompt, add_special_tokens=True)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def drops(self, token_id: int, skip_special_tokens: bool = True) -> bool:
        """Whether :meth:`decode` leaves ``token_id`` out wherever it stands: an id the vocabulary
        lacks, or a special token while special tokens are skipped. The backend's decode drops such
        ids before its decoder reads the rest, so a text is the same with them or without them."""
        known = self._dropped[skip_special_tokens]
        dropped = known.get(token_id)
        if dropped is None:
            token = self.backend.id_to_token(token_id)
            dropped = known[token_id] = token is None or (skip_special_tokens and token in self._special_strings)
        return dropped

    @cached_property
    def _dropped(self) -> dict[bool, dict[int, bool]]:
        """:meth:`drops`' answers so far, by ``skip_special_tokens``."""
        return {True: {}, False: {}}

    @cached_property
    def _special_strings(self) -> frozenset[str]:
        """The special added tokens' strings: decode skips a token whose string is one of them."""
        return frozenset(t.content for t in self.backend.get_added_tokens_decoder().values() if t.special)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    @cached_property
    def _template(self) -> jinja2.Template:
        if not self.chat_template:
            raise ChatTemplateError("this model has no chat template; encode the prompt as plain text instead")
        try:
            return compile_chat_template(self.chat_template)
        except jinja2.exceptions.TemplateSyntaxError as err:
            raise ChatTemplateError(f"the model's chat template does not parse: {err}") from err

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None) -> str:
        """The prompt text for ``messages`` ([{"role": ..., "content": ...}, ...]) and the ``tools``
        offered (JSON schemas of functions, OpenAI's ``{"type": "function", "function": {...}}``), as
        HF renders them (``apply_chat_template(..., tools=tools)``)."""
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         tools=tools, documents=None, **self.special_tokens)
        except jinja2.exceptions.TemplateError as err:
            raise ChatTemplateError(f"chat template failed: {err}") from err
