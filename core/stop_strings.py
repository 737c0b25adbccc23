"""Where a sequence ends on its new token (EOS, a stop token or string, its length); its text before a stop string."""
from __future__ import annotations

from typing import Callable

from .sched.scheduler import Sequence


def finish_reason(seq: Sequence, token: int, decode: Callable[[list[int]], str]) -> str | None:
    """Why ``seq`` ends now that ``token`` (already in its output) came, or None: "eos", "stop" (a
    stop token, or a stop string in the text ``decode`` makes of its output) or "length"."""
    params = seq.sampling
    reason = None
    if token in seq.eos_ids:
        reason = "eos"
    elif token in params.stop_token_ids:
        reason = "stop"
    elif params.stop and cut_at_stop(decode(seq.output), params.stop)[1]:
        reason = "stop"
    elif len(seq.output) >= seq.max_new_tokens:
        reason = "length"
    return reason


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string, and whether it had one."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)
