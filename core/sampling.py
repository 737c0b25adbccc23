"""Sampling parameters and the next-token choice (greedy, temperature, top-k, top-p)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .errors import EngineConfigError


@dataclass
class SamplingParams:
    """How to pick tokens. ``temperature == 0`` is greedy (top-k and top-p are then unused)."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0          # 0: no top-k filter
    top_p: float = 1.0      # 1.0: no nucleus filter
    seed: int | None = None

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    def validate(self) -> None:
        """Raise :class:`EngineConfigError` naming the first bad value."""
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise EngineConfigError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if not _is_number(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise EngineConfigError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise EngineConfigError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise EngineConfigError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        if self.seed is not None and (not _is_int(self.seed) or self.seed < 0):
            raise EngineConfigError(f"seed must be a non-negative integer or None, got {self.seed!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Next token of each row of ``logits`` [B, V] (float32): temperature, then top-k, then top-p,
    as HF transformers orders its warpers. Returns [B] int64."""
    if params.is_greedy:
        return logits.argmax(dim=-1)
    logits = logits / params.temperature
    if params.top_k > 0:
        k = min(params.top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]                 # [B, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative - sorted_logits.softmax(dim=-1) >= params.top_p   # keep the first token always
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
