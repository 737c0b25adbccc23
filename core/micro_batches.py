"""The micro-batches of a pipeline-parallel step: which rows each one takes."""
from __future__ import annotations


def micro_batch_bounds(rows: int, decode: bool, pp: int) -> list[tuple[int, int]]:
    """The row ranges of a step's micro-batches: a decode step of 2 rows or more splits in
    min(pp, rows) near-equal parts (so the stages overlap); other steps are one micro-batch."""
    parts = min(pp, rows) if decode and rows >= 2 else 1
    cuts = [rows * i // parts for i in range(parts + 1)]
    return list(zip(cuts, cuts[1:]))
