"""A completions answer that repeats its prompt (``echo``): the prompt's text as the answer starts with it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Echo:
    """A completions answer that repeats its prompt (``text``); ``only``: it answers the prompt alone
    (``max_tokens`` 0: the one token that ran is not answered)."""

    text: str
    only: bool


def prompt_text(tokenizer, ids: list[int]) -> str:
    """The text of a prompt given as token ids (special tokens kept: echo repeats the prompt as sent)."""
    return tokenizer.decode(ids, skip_special_tokens=False) if tokenizer is not None else ""
