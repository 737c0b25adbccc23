"""Freeing rank threads blocked in a collective after a failure: communicator abort (contract 1.4).

A rank whose peer died, hung or raised before joining a collective waits for it forever (NCCL) or
until the collective timeout (cpu). When the engine knows the group is broken it aborts the ranks'
communicators, so that their waits end with an error and their threads can be released and joined.
Backends without ``comm_abort`` keep the old behaviour: nothing is aborted.
"""
from __future__ import annotations

import threading
import time

#: Seconds to wait for the aborts (an abort that itself hangs must not keep a failing process alive).
ABORT_WAIT_S = 10.0


def abort_communicators(comms, wait_s: float = ABORT_WAIT_S) -> list[BaseException]:
    """Abort each communicator of ``comms`` (None entries skipped) whose backend supports it, each on
    its own helper thread, all at once (a collective library's abort may wait for the other ranks on
    the node to abort theirs: NCCL's can), waited for at most ``wait_s`` in all. Returns the errors
    met, for the caller to note on the failure it raises (they never replace it); an abort still
    running after ``wait_s`` is one."""
    comms = [c for c in comms if c is not None and c.runtime.supports("comm_abort")]
    problems: list[BaseException] = []

    def abort(comm) -> None:
        try:
            comm.abort()
        except Exception as exc:  # reported to the caller, which notes it on the original failure
            problems.append(exc)

    threads = [threading.Thread(target=abort, args=(c,), name="anydev-comm-abort", daemon=True) for c in comms]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + wait_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(thread.is_alive() for thread in threads)
    if stuck:
        problems.append(TimeoutError(f"aborting {stuck} of {len(comms)} communicator(s) did not finish within {wait_s:g} s"))
    return problems
