"""The OpenAI ``logprobs`` objects of a choice, built from the engine's per-token log-probabilities
(:class:`~anydev.core.sched.logprobs.TokenLogprobs`), whole or one streamed chunk at a time.

Chat: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}``.
Completions: ``{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}``.
A token's string is its own decode (special tokens included); a token that holds part of a
character's bytes reads as U+FFFD, as in vLLM.
"""
from __future__ import annotations

from functools import lru_cache


class LogprobsWriter:
    """One choice's logprobs as its tokens arrive: :meth:`take` gives the object for the tokens not
    written yet (a streamed chunk's, or the whole answer's). ``chat``: the chat shape, else the
    completions one."""

    def __init__(self, tokenizer, chat: bool):
        self.chat = chat
        self._token_text = _token_texts(tokenizer)
        self._written = 0
        self._offset = 0      # completions' text_offset: characters of the tokens written so far

    def take(self, tokens: list[int], logprobs: list, upto: int | None = None) -> dict:
        """The object for the output ``tokens`` (and their ``logprobs``) from the first not written
        yet up to ``upto`` (all of them when None)."""
        end = min(len(tokens), len(logprobs)) if upto is None else min(upto, len(logprobs))
        new = list(zip(tokens[self._written:end], logprobs[self._written:end]))
        self._written += len(new)
        if self.chat:
            return {"content": [self._chat_entry(token, lp) for token, lp in new]}
        tokens, offsets = [], []
        for token, _ in new:
            text = self._token_text(token)
            tokens.append(text)
            offsets.append(self._offset)
            self._offset += len(text)
        return {"tokens": tokens, "token_logprobs": [lp.logprob for _, lp in new],
                "top_logprobs": [{self._token_text(i): v for i, v in lp.top} for _, lp in new],
                "text_offset": offsets}

    def prompt(self, tokens: list[int], prompt_logprobs: list) -> dict:
        """Completions' object for an echoed prompt (written before the output's): its first token has
        no logprob (None, as OpenAI gives it), each later one the engine's ``prompt_logprobs`` entry."""
        texts = [self._token_text(t) for t in tokens]
        offsets = _offsets(texts)
        self._offset = offsets[-1] + len(texts[-1]) if texts else 0
        scored = [None, *prompt_logprobs][:len(tokens)]
        return {"tokens": texts, "token_logprobs": [lp.logprob if lp else None for lp in scored],
                "top_logprobs": [{self._token_text(i): v for i, v in lp.top} if lp else None for lp in scored],
                "text_offset": offsets}

    def _chat_entry(self, token: int, lp) -> dict:
        return {**self._described(token, lp.logprob), "top_logprobs": [self._described(i, v) for i, v in lp.top]}

    def _described(self, token: int, logprob: float) -> dict:
        text = self._token_text(token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def logprobs_writer(tokenizer, sampling, chat: bool) -> LogprobsWriter | None:
    """The writer of a request's logprobs, or None when its ``sampling`` asks for none."""
    return LogprobsWriter(tokenizer, chat) if sampling.logprobs is not None else None


def joined(first: dict, then: dict) -> dict:
    """Two completions logprobs objects, one after the other (an echoed prompt's, then the output's)."""
    return {key: first[key] + then[key] for key in first}


def _offsets(texts: list[str]) -> list[int]:
    out, at = [], 0
    for text in texts:
        out.append(at)
        at += len(text)
    return out


def _token_texts(tokenizer):
    """A cached ``token id -> its text``; "" for every id without a tokenizer."""
    if tokenizer is None:
        return lambda token: ""

    @lru_cache(maxsize=65536)
    def text(token: int) -> str:
        return tokenizer.decode([token], skip_special_tokens=False)

    return text
