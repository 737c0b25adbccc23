"""Where a sequence ends on its new token: EOS, a stop token, a stop string in its text, its length."""
from __future__ import annotations

from .sched.scheduler import Sequence


def finish_reason(seq: Sequence, token: int) -> str | None:
    """Why ``seq`` ends now that ``token`` (already in its output) came, or None: "eos", "stop" (a
    stop token, or a stop string its :class:`~.output.OutputText` finds with this token) or "length".
    The token always reaches the sequence's text, so the text stays whole whatever ends it."""
    params = seq.sampling
    hit_stop_string = seq.text is not None and seq.text.add(token)
    reason = None
    if token in seq.eos_ids:
        reason = "eos"
    elif token in params.stop_token_ids or hit_stop_string:
        reason = "stop"
    elif len(seq.output) >= seq.max_new_tokens:
        reason = "length"
    return reason
