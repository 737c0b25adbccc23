"""A request's output as text: token ids decoded, cut before a stop string, handed out only once settled."""
from __future__ import annotations

from .async_engine import RequestStream
from .state import ServerState


def decode(state: ServerState, ids: list[int]) -> str:
    """Token ids to text (special tokens skipped); "" when the model has no tokenizer."""
    return state.tokenizer.decode(ids, skip_special_tokens=True) if state.tokenizer else ""


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string, and whether it had one."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)


def stop_finder(state: ServerState, stops: list[str]):
    """For :meth:`AsyncEngine.add_request`: the number of output tokens at which one of ``stops``
    first appears in the text (only counts above ``checked`` are tried), or None: the request then
    ends there with finish reason "stop", as the engine's own stop strings do."""
    def find(output: list[int], checked: int) -> int | None:
        if not cut_at_stop(decode(state, output), stops)[1]:
            return None
        return next(k for k in range(checked + 1, len(output) + 1) if cut_at_stop(decode(state, output[:k]), stops)[1])
    return find


class OutputText:
    """A request's output text as it grows: only settled text is handed out (no half of a UTF-8
    character, nothing that may still become a stop string)."""

    def __init__(self, state: ServerState, stream: RequestStream):
        self.state, self.stream = state, stream
        self.hold = max((len(s) for s in stream.sampling.stop), default=1) - 1
        self.sent = ""

    def delta(self, num_tokens: int, finished: bool) -> str:
        if finished:
            text = cut_at_stop(decode(self.state, self.stream.output), self.stream.sampling.stop)[0]
        else:
            text = decode(self.state, self.stream.output[:num_tokens]).rstrip("\ufffd")
            text = text[:len(text) - self.hold] if self.hold else text
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        new, self.sent = text[len(self.sent):], text
        return new
