"""A command's start-up as its user meets it: the seconds from the process's start to its first token, by phase.

Every phase is a stretch of the command's main thread, one after another, so they add up to the time
from the process's start to the end of the last phase marked. The engine's stretch (building
:class:`~.engine.InferEngine`) is split into rank 0's init and capture phases
(:data:`~.timeline.PHASES`, :data:`~.timeline.CAPTURE_PHASES`), the loading of the backend's kernels
and what is left ("engine other": starting the executor, the other ranks, waiting for them).
Imports no torch (a command takes it first, before anything else it imports).
"""
from __future__ import annotations

import json
import os
import re
import time

from .timeline import CAPTURE_PHASES, PHASES

#: A command's start-up phases, in order:
#: interpreter: the process's start to the command's first line (Python's own start-up and site);
#: imports: the command's imports (torch, the engine); backend open: the backend plugin loaded and its
#: runtime opened; checkpoint + tokenizer: the checkpoint's config, tokenizer and weight index opened
#: and the prompt checked; kernels load: the backend's kernels selected (their modules imported:
#: Triton); then rank 0's init phases and capture phases, engine other; first prefill: from asking for
#: the tokens to the first sampled token on the host (prompt encoding, the prefill step, sampling,
#: read back); first token: from there to the first token shown to the user.
PROCESS_PHASES = ("interpreter", "imports", "backend open", "checkpoint + tokenizer", "kernels load", *PHASES,
                  *CAPTURE_PHASES, "engine other", "first prefill", "first token")

#: Set by a parent to its ``time.time()`` just before it started this process: the start to the microsecond.
SPAWN_TIME_ENV = "ANYDEV_SPAWN_TIME"


def process_start_time() -> float | None:
    """``time.time()`` at this process's start: ``$ANYDEV_SPAWN_TIME`` when a parent set it, else from
    ``/proc/self/stat`` (Linux: to the clock tick), else None."""
    spawned = os.environ.get(SPAWN_TIME_ENV)
    if spawned:
        return float(spawned)
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started_since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")   # field 22: starttime
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started_since_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def phases_line(phases: dict[str, float]) -> str:
    """``phases`` (seconds) in one line, those of 5 ms or more: "imports 3.10 s, weights 0.68 s"."""
    return ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in phases.items() if seconds >= 0.005)


_PHASE_IN_LINE = re.compile(r"\s*(?P<phase>[^,]+?) (?P<seconds>\d+\.\d+) s(?:,|$)")


def parse_phases_line(line: str) -> dict[str, float]:
    """The phases of a :func:`phases_line`; a phase not of :data:`PROCESS_PHASES` raises ValueError."""
    phases = {m["phase"]: float(m["seconds"]) for m in _PHASE_IN_LINE.finditer(line)}
    unknown = [phase for phase in phases if phase not in PROCESS_PHASES]
    if unknown:
        raise ValueError(f"unknown start-up phases {unknown} in {line!r}")
    return phases


class ProcessTimeline:
    """The phases of one command, marked in order on its main thread: ``mark(phase)`` ends ``phase``
    now (or at ``at``, a ``time.perf_counter()``); :meth:`mark_engine` ends the engine's stretch."""

    def __init__(self, started: float | None = None):
        started = process_start_time() if started is None else started
        now_wall, now = time.time(), time.perf_counter()
        #: The process's start in ``time.perf_counter()`` seconds (None: unknown, "interpreter" is 0).
        self.start = None if started is None else now - (now_wall - started)
        self._wall_offset = now_wall - now
        self.seconds: dict[str, float] = {}
        self._last = self.start if self.start is not None else now
        self.mark("interpreter", now)

    def mark(self, phase: str, at: float | None = None) -> None:
        """End ``phase`` at ``at`` (default now): it lasted since the previous mark."""
        if phase not in PROCESS_PHASES:
            raise ValueError(f"unknown start-up phase {phase!r}; the phases: {PROCESS_PHASES}")
        at = time.perf_counter() if at is None else at
        self.seconds[phase] = self.seconds.get(phase, 0.0) + max(0.0, at - self._last)
        self._last = max(self._last, at)

    def mark_engine(self, engine) -> None:
        """End the engine's stretch now, split into the kernels' load, rank 0's init and capture phases
        (``engine.timeline``, ``engine.capture_timeline``) and the rest ("engine other")."""
        now = time.perf_counter()
        span = now - self._last
        parts = {"kernels load": engine.kernels_load_seconds}
        for record in [*engine.timeline, *engine.capture_timeline]:
            if record.rank == 0:
                parts[record.phase] = parts.get(record.phase, 0.0) + record.seconds
        for phase in (*PHASES, *CAPTURE_PHASES, "kernels load"):
            self.seconds[phase] = self.seconds.get(phase, 0.0) + parts.get(phase, 0.0)
        self.seconds["engine other"] = self.seconds.get("engine other", 0.0) + max(0.0, span - sum(parts.values()))
        self._last = now

    def to_json(self) -> dict:
        """The phases in seconds (every one of :data:`PROCESS_PHASES`, 0 where none ran), the process's
        start and the last mark as ``time.time()``, and the total."""
        phases = {phase: self.seconds.get(phase, 0.0) for phase in PROCESS_PHASES}
        return {"phases": phases, "total": sum(phases.values()),
                "started_at": None if self.start is None else self.start + self._wall_offset,
                "last_mark_at": self._last + self._wall_offset}

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)

    def format(self) -> str:
        """One line per phase (milliseconds) and the total."""
        rows = [(phase, seconds) for phase, seconds in self.to_json()["phases"].items()]
        width = max(len(p) for p, _ in rows)
        lines = [f"  {p.ljust(width)}  {s * 1e3:9.1f} ms" for p, s in rows]
        lines.append(f"  {'total'.ljust(width)}  {sum(s for _, s in rows) * 1e3:9.1f} ms")
        return "\n".join(lines)
