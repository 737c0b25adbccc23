"""Freeing rank threads blocked in a collective after a failure: communicator abort (contract 1.4).

A rank whose peer died, hung or raised before joining a collective waits for it forever (NCCL) or
until the collective timeout (cpu). When the engine knows the group is broken it aborts the ranks'
communicators, so that their waits end with an error and their threads can be released and joined.
Backends without ``comm_abort`` keep the old behaviour: nothing is aborted.
"""
from __future__ import annotations

import threading

#: Seconds to wait for the aborts (an abort that itself hangs must not keep a failing process alive).
ABORT_WAIT_S = 10.0


def abort_communicators(comms, wait_s: float = ABORT_WAIT_S) -> list[BaseException]:
    """Abort each communicator of ``comms`` (None entries skipped) whose backend supports it, on a
    helper thread waited for at most ``wait_s``. Returns the errors met, for the caller to note on the
    failure it raises (they never replace it); an abort still running after ``wait_s`` is one."""
    comms = [c for c in comms if c is not None and c.runtime.supports("comm_abort")]
    if not comms:
        return []
    problems: list[BaseException] = []

    def abort_all() -> None:
        for comm in comms:
            try:
                comm.abort()
            except Exception as exc:  # reported to the caller, which notes it on the original failure
                problems.append(exc)

    thread = threading.Thread(target=abort_all, name="anydev-comm-abort", daemon=True)
    thread.start()
    thread.join(wait_s)
    if thread.is_alive():
        problems.append(TimeoutError(f"aborting {len(comms)} communicator(s) did not finish within {wait_s:g} s"))
    return problems
