"""The processes below a pid, from /proc: what tests use to show that nothing is left running."""
from __future__ import annotations

import os
import time


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc: each process's parent)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def still_running(pids: set[int], seconds: float = 30) -> list[int]:
    """Those of ``pids`` still running after up to ``seconds`` (multiprocessing's resource tracker
    ends a moment after the server)."""
    deadline = time.monotonic() + seconds
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if running(pid)]
