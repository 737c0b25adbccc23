"""Mutants of communicator abort (contract 1.4): an abort that refuses later calls but frees no
waiting rank, and an abort that does nothing at all (only the Python object says aborted)."""
from __future__ import annotations

from anydev.backends.cpu.runtime import CpuRuntime

from . import mutant

CHECKS = ["test_comm_abort.py"]


@mutant("comm-abort-frees-no-waiter", checks=CHECKS)
class AbortFreesNoWaiter(CpuRuntime):
    """comm_abort refuses later calls on the communicator but ends none of its waits: a rank blocked
    on a peer that never joins stays blocked (until the collective timeout)."""

    def comm_abort(self, comm):
        self._comm("comm_abort", comm)
        self._aborted.add(comm)


@mutant("comm-abort-noop", checks=CHECKS)
class AbortDoesNothing(CpuRuntime):
    """comm_abort does nothing: the runtime keeps accepting collectives on the aborted communicator."""

    def comm_abort(self, comm):
        self._comm("comm_abort", comm)
