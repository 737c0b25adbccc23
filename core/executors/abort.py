"""Freeing rank threads blocked in a collective after a failure: communicator abort (contract 1.4).

A rank whose peer died, hung or raised before joining a collective waits for it forever (NCCL) or
until the collective timeout (cpu). When the engine knows the group is broken it aborts the ranks'
communicators, so that their waits end with an error and their threads can be released and joined.
On a backend without ``comm_abort`` nothing is aborted: its waits end at its own collective
timeout, if it has one. Destroying a group's communicators at close goes through the same
all-at-once helper.
"""
from __future__ import annotations

import threading
import time

#: Seconds to wait for the aborts (an abort that itself hangs must not keep a failing process alive).
ABORT_WAIT_S = 10.0


def abort_communicators(comms, wait_s: float = ABORT_WAIT_S) -> list[BaseException]:
    """Abort each communicator of ``comms`` (None entries skipped) whose backend supports it, all at
    once (see :func:`on_each_at_once`), waited for at most ``wait_s`` in all. Returns the errors
    met, for the caller to note on the failure it raises (they never replace it); an abort still
    running after ``wait_s`` is one."""
    comms = [c for c in comms if c is not None and c.runtime.supports("comm_abort")]
    return on_each_at_once(comms, lambda comm: comm.abort(), "aborting", wait_s)


def close_communicators(comms) -> list[BaseException]:
    """Destroy every communicator of ``comms``, all at once (see :func:`on_each_at_once`); the
    errors met, for the caller to report."""
    return on_each_at_once(comms, lambda comm: comm.close(), "destroying")


def on_each_at_once(comms, call, what: str, wait_s: float | None = None) -> list[BaseException]:
    """``call(comm)`` for every communicator, each on its own thread, all started before any is
    waited for: a collective library's abort or destroy may wait for the communicator's other ranks
    to abort or destroy theirs (NCCL's can, within a node), so one after another they might never
    meet. Waits at most ``wait_s`` in all (None: until every call returned); returns the errors
    met, with one for the calls still running then."""
    problems: list[BaseException] = []

    def run(comm) -> None:
        try:
            call(comm)
        except Exception as exc:  # reported to the caller
            problems.append(exc)

    threads = [threading.Thread(target=run, args=(c,), name=f"anydev-comm-{what}", daemon=True) for c in comms]
    for thread in threads:
        thread.start()
    deadline = None if wait_s is None else time.monotonic() + wait_s
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    stuck = sum(thread.is_alive() for thread in threads)
    if stuck:
        problems.append(TimeoutError(f"{what} {stuck} of {len(comms)} communicator(s) did not finish within {wait_s:g} s"))
    return problems
