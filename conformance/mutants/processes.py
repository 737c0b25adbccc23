"""Mutants of the collectives across processes: right within one process, wrong between processes."""
from __future__ import annotations

from anydev.backends.cpu.gloo import GlooGroup, _elements
from anydev.backends.cpu.runtime import CpuRuntime

from . import mutant


class _GlooFault(CpuRuntime):
    """The cpu backend whose communicators spanning processes (gloo groups) get ``_break(group)``."""

    def comm_init_rank(self, unique_id, nranks, rank):
        handle = super().comm_init_rank(unique_id, nranks, rank)
        group = self._comms[handle].group
        if isinstance(group, GlooGroup):
            self._break(group)
        return handle

    @staticmethod
    def _break(group: GlooGroup) -> None:
        raise NotImplementedError


@mutant("gloo-all-gather-reversed", checks=["test_processes.py"])
class GlooAllGatherReversed(_GlooFault):
    """Across processes (gloo), all_gather stores the ranks' parts in reverse rank order."""

    @staticmethod
    def _break(group):
        right = group._all_gather

        def reversed_parts(request):
            right(request)
            recv = _elements(request.recv, request.count * group.nranks, request.dtype)
            recv.copy_(recv.view(group.nranks, request.count).flip(0).reshape(-1))

        group._all_gather = reversed_parts


@mutant("gloo-recv-drops", checks=["test_processes.py"])
class GlooRecvKeepsOwnData(_GlooFault):
    """Across processes (gloo), recv leaves the receive buffer as it was (the message is dropped)."""

    @staticmethod
    def _break(group):
        right = group.recv
        group.recv = lambda rank, peer, address, count, dtype: right(rank, peer, _scratch(count, dtype), count, dtype)


_kept = []


def _scratch(count: int, dtype: str) -> int:
    import torch

    from anydev.backends.cpu.gloo import TORCH_DTYPES

    buffer = torch.empty(count, dtype=TORCH_DTYPES[dtype])
    _kept.append(buffer)
    return buffer.data_ptr()
