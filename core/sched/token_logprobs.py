"""One token's log-probabilities as an answer carries them (no torch: the HTTP front ends decode them;
they are computed by :mod:`.logprobs`)."""
from __future__ import annotations

from dataclasses import dataclass

#: The most alternatives a request may ask for (OpenAI's top_logprobs maximum).
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class TokenLogprobs:
    """One token's log-probability and its position's likeliest tokens (id, log-probability), best first."""

    logprob: float
    top: tuple[tuple[int, float], ...]
