"""The init timeline: when each rank spent its time in each phase, as data and as a table."""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

#: Init phases of a rank, in order.
PHASES = ("device setup", "weights", "kv alloc", "kv zero", "sync", "ready")
#: A rank's graph capture at start-up, after init (each recorded once per capture): "kernel compile"
#: is the eager run before each capture, where Triton compiles (or loads from its cache) the step's
#: kernels; "graph capture" the capture itself.
CAPTURE_PHASES = ("kernel compile", "graph capture")


@dataclass
class PhaseRecord:
    """One phase of one rank: ``start``/``end`` are ``time.perf_counter()`` seconds."""

    rank: int
    phase: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Timeline:
    """Thread-safe list of :class:`PhaseRecord`, filled by the rank workers."""

    def __init__(self):
        self.records: list[PhaseRecord] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def phase(self, rank: int, phase: str):
        """Time the body as ``phase`` of ``rank`` (recorded even when the body raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.records.append(PhaseRecord(rank, phase, start, time.perf_counter()))


def phase_seconds(records: list[PhaseRecord], rank: int, phase: str) -> float:
    """Total seconds ``rank`` spent in ``phase`` (0.0 when it never ran)."""
    return sum(r.seconds for r in records if r.rank == rank and r.phase == phase)


def format_timeline(records: list[PhaseRecord], t0: float | None = None) -> str:
    """A table: one row per rank, milliseconds per phase, and when the rank started and finished
    (relative to ``t0``, default the earliest start), so serial and parallel init read at a glance."""
    if not records:
        return "(no init timeline)"
    t0 = min(r.start for r in records) if t0 is None else t0
    phases = [*PHASES, *(p for p in CAPTURE_PHASES if any(r.phase == p for r in records))]
    header = ["rank", *phases, "start", "end"]
    rows = []
    for rank in sorted({r.rank for r in records}):
        mine = [r for r in records if r.rank == rank]
        cells = [str(rank)] + [f"{phase_seconds(mine, rank, p) * 1e3:.1f}" for p in phases]
        cells += [f"{(min(r.start for r in mine) - t0) * 1e3:.1f}", f"{(max(r.end for r in mine) - t0) * 1e3:.1f}"]
        rows.append(cells)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths)) + "   (milliseconds)"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)
