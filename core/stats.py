"""The engine's statistics: each generate call's token counts and times, and the scheduler's counters."""
from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class GenerationStats:
    """Token counts, steps and wall time of the last generate call (prefill steps, any with prompt
    tokens, vs decode steps).

    A step's seconds run from building its batch on the host (or from the previous step's tokens
    being back, if later: overlapped steps count once) to having its token ids back;
    ``decode_build_seconds`` is the host-only share spent building the decode batches."""

    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    prefill_steps: int = 0
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    decode_steps: int = 0
    decode_build_seconds: float = 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def decode_step_ms(self) -> float:
        return 1000 * self.decode_seconds / self.decode_steps if self.decode_steps else 0.0

    @property
    def decode_build_ms(self) -> float:
        return 1000 * self.decode_build_seconds / self.decode_steps if self.decode_steps else 0.0


@dataclass(frozen=True)
class EngineCounters:
    """What :meth:`InferEngine.stats <anydev.core.engine.InferEngine.stats>` reports: the requests
    running and waiting, the KV blocks in use and in all, the prefix cache's blocks and hits, the
    preemptions so far, and the steps since start-up as :class:`GenerationStats` counts them (prefill:
    any step with prompt tokens; their tokens and wall seconds, overlapped steps counted once)."""

    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    prefix_cache_blocks: int
    prefix_cache_hit_rate: float
    prefix_cache_queried_tokens: int
    prefix_cache_hit_tokens: int
    preemptions: int
    prefill_steps: int = 0
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_steps: int = 0
    decode_tokens: int = 0
    decode_seconds: float = 0.0


def count_step(stats: GenerationStats, launched, last_done: float) -> float:
    """Count a step whose tokens are back into ``stats``; returns now, the next ``last_done``. Its
    seconds run from when it started being built (or when the step before it was back, at
    ``last_done``, if later: overlapped steps are not counted twice) to now."""
    now = time.perf_counter()
    seconds = now - max(launched.start, last_done)
    s = stats
    if launched.decode:
        s.decode_tokens += launched.num_tokens
        s.decode_seconds += seconds
        s.decode_steps += 1
        s.decode_build_seconds += launched.built - launched.start
    else:
        s.prefill_tokens += launched.num_tokens
        s.prefill_seconds += seconds
        s.prefill_steps += 1
    return now


def stats_since(before: GenerationStats, now: GenerationStats) -> GenerationStats:
    return GenerationStats(**{name: getattr(now, name) - value for name, value in vars(before).items()})
