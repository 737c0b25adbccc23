"""What the benchmarks print and write: percentiles, vLLM's result lines, the JSON file."""
from __future__ import annotations

import json
import os
import random
import statistics

#: The percentiles of ``anydev bench latency`` (vLLM's).
LATENCY_PERCENTILES = (10, 25, 50, 75, 90, 99)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, linear between the closest ranks (numpy's default); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def random_prompts(count: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    """``count`` prompts of ``length`` random token ids (0 and 1 left out: the demo model's specials)."""
    rng = random.Random(seed)
    return [[rng.randrange(2, vocab_size) for _ in range(length)] for _ in range(count)]


def print_block(title: str, lines: list[tuple[str, object]]) -> None:
    """vLLM's result block: a ruled title, then ``label: value`` lines aligned."""
    print(f"{f' {title} ':=^50}")
    for label, value in lines:
        if value is None:
            print(f"{label:-^50}")          # a section rule
        else:
            print(f"{label + ':':<40}{value:<10.2f}" if isinstance(value, float) else f"{label + ':':<40}{value:<10}")
    print("=" * 50)


def write_json(path: str | None, figures: dict) -> None:
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            json.dump(figures, f, indent=2)
