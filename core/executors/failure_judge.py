"""Naming the rank of a process group that failed first: from deaths, stopped heartbeats and the reports."""
from __future__ import annotations

import signal
import time
from typing import Callable

#: How long rank 0 gathers reports after a first failure, so that the rank that failed first is named
#: rather than one that failed because of it.
GRACE_S = 1.0
#: Without child processes to watch (torchrun), how long a rank's heartbeat must stand still, after a
#: collective failed, for it to count as the rank gone (several beats of HEARTBEAT_INTERVAL_S).
STALL_S = 2.5


def find_deaths(children: list, new_client: Callable, world_size: int, reason: str) -> dict[int, str]:
    """The ranks gone, each with how: with child processes to watch (mp), those that exited, looked at
    once the grace period for the others' reports is over; without (torchrun: processes of other
    machines), those whose heartbeat stopped."""
    if children:
        time.sleep(GRACE_S)
        return {r: f"its process (pid {c.pid}) exited with code {c.returncode}"
                   + (f" ({signal.Signals(-c.returncode).name})" if c.returncode < 0 else "")
                for r, c in enumerate(children, 1) if c.poll() is not None}
    return {r: f"its heartbeat stopped (the process died or hung; the group's collectives failed: {reason})"
            for r in stalled_ranks(new_client, world_size, STALL_S)}


def first_failure(deaths: dict[int, str], reports: dict[int, str], stopped: set[int], rank: int,
                  reason: str) -> tuple[int, str]:
    """The rank that failed first and why, from ``deaths`` (see :func:`find_deaths`), the ranks'
    failure ``reports`` and the ranks ``stopped`` because of another; ``rank`` and ``reason`` (the
    first sign seen) when neither names one."""
    if deaths:   # the first to die, not the first to notice: not one that ended because a peer had
        caused = {r for r in deaths if r in stopped or lost_peers(reports.get(r, ""))}
        first = min(set(deaths) - caused or deaths)
        reason = deaths[first] + (f"; it reported: {reports[first]}" if first in reports else "")
    elif reports:   # a rank's own error before the collectives failed on its peers because of it
        primary = {r: text for r, text in reports.items() if not lost_peers(text)} or reports
        first = min(primary)
        reason = primary[first]
    else:
        first = rank
    return first, reason


def stalled_ranks(new_client: Callable, world_size: int, seconds: float) -> list[int]:
    """The ranks other than 0 whose heartbeat did not move for ``seconds`` (several beats)."""
    try:
        client = new_client()
        before = {r: client.add(f"heartbeat/{r}", 0) for r in range(1, world_size)}
        time.sleep(seconds)
        return [r for r, beats in before.items() if client.add(f"heartbeat/{r}", 0) == beats]
    except Exception:  # the store is gone: no rank to name from it
        return []


def lost_peers(text: str) -> bool:
    """Whether a rank's failure report is a collective that failed because a peer did."""
    return any(sign in text for sign in ("lost its peers", "lost rank", "Connection reset", "Connection closed"))
