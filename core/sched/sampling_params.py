"""A request's sampling parameters and their checks (no torch: the HTTP front ends build and validate them;
the draw itself is :mod:`.sampling`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import EngineConfigError
from .structured import StructuredOutput

GREEDY_BELOW = 1e-5
#: The largest seed: torch's generators take 64-bit seeds (a larger one fails only inside a step).
MAX_SEED = 2**64 - 1


@dataclass
class SamplingParams:
    """How to pick tokens. ``temperature == 0`` is greedy (top-k and top-p are then unused), and so
    is any temperature below ``GREEDY_BELOW`` (as in vLLM): dividing logits by it would overflow."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0          # 0: no top-k filter
    top_p: float = 1.0      # 1.0: no nucleus filter
    seed: int | None = None
    stop: list[str] = field(default_factory=list)           # stop strings (not part of the text returned)
    stop_token_ids: list[int] = field(default_factory=list)  # stop tokens besides the model's EOS
    ignore_eos: bool = False                                  # run to max_new_tokens past EOS (benchmarks)
    logprobs: int | None = None   # each output token's log-probability and this many likeliest tokens' (0..20)
    prompt_logprobs: int | None = None   # the same for every prompt token after the first (0..20)
    min_p: float = 0.0                # drop tokens less likely than min_p x the likeliest's probability
    presence_penalty: float = 0.0     # OpenAI's: minus this for every token the output has (-2..2)
    frequency_penalty: float = 0.0    # OpenAI's: minus this x how often the output has the token (-2..2)
    repetition_penalty: float = 1.0   # HF's: a seen token's (prompt or output) logit divided by it (0.1-10)
    logit_bias: dict[int, float] | None = None   # added to those tokens' logits (-100..100)
    structured: StructuredOutput | None = None   # what the output must match (see .structured)

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def validate(self) -> None:
        """Raise :class:`EngineConfigError` naming the first bad value: the one check of a request's
        sampling values for every front end (the engine calls it on every request it takes), so
        that no value can fail later inside a step, where it would stop every rank."""
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise EngineConfigError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if not _is_number(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise EngineConfigError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise EngineConfigError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise EngineConfigError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED):
            raise EngineConfigError(f"seed must be an integer in 0..2**64-1 or None, got {self.seed!r}")
        if not isinstance(self.stop, (list, tuple)) or not all(isinstance(s, str) and s for s in self.stop):
            raise EngineConfigError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if not isinstance(self.stop_token_ids, (list, tuple)) or not all(_is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise EngineConfigError(f"stop_token_ids must be a list of token ids, got {self.stop_token_ids!r}")
        if not isinstance(self.ignore_eos, bool):
            raise EngineConfigError(f"ignore_eos must be true or false, got {self.ignore_eos!r}")
        if not _is_number(self.min_p) or not 0 <= self.min_p <= 1:
            raise EngineConfigError(f"min_p must be in [0, 1] (0 = off), got {self.min_p!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not -2 <= value <= 2:
                raise EngineConfigError(f"{name} must be in [-2, 2] (0 = off), got {value!r}")
        # 1/10 to 10: a seen token's logit is divided or multiplied by it, and a penalty near 0 makes the
        # logits infinite (then NaN in the softmax)
        if not _is_number(self.repetition_penalty) or not 0.1 <= self.repetition_penalty <= 10:
            raise EngineConfigError(f"repetition_penalty must be in [0.1, 10] (1 = off), got {self.repetition_penalty!r}")
        if self.logit_bias is not None and (not isinstance(self.logit_bias, dict) or not all(
                _is_int(k) and k >= 0 and _is_number(v) and -100 <= v <= 100 for k, v in self.logit_bias.items())):
            raise EngineConfigError(f"logit_bias must map token ids to numbers in [-100, 100], got {self.logit_bias!r}")
        if self.structured is not None:
            if not isinstance(self.structured, StructuredOutput):
                raise EngineConfigError(f"structured must be a StructuredOutput or None, got {self.structured!r}")
            self.structured.validate()
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or not 0 <= value <= 20):
                raise EngineConfigError(f"{name} must be an integer in 0..20 or None, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
