"""In-process collectives: the ranks are threads of this process, one per virtual device.

A collective runs on each rank's stream worker. All ranks meet at a barrier (so every ``send`` is
ready), rank 0 computes the result from all ranks' memory, all meet again, and each rank writes its
own ``recv``. Reading every ``send`` before anyone writes makes in-place calls (send == recv) safe.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from anydev.plugin_api import CollectiveTimeoutError, InvalidArgumentError

TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
    "float64": torch.float64, "int64": torch.int64, "int8": torch.int8, "uint8": torch.uint8,
}


def view(address: int, count: int, dtype: str) -> torch.Tensor:
    """A tensor over ``count`` elements at ``address`` (no copy)."""
    from .memory import tensor_at

    return tensor_at(address, count * torch.empty((), dtype=TORCH_DTYPES[dtype]).element_size()).view(TORCH_DTYPES[dtype])


@dataclass(frozen=True)
class Call:
    """One rank's arguments to one collective."""

    kind: str  # "all_reduce", "all_gather" or "broadcast"
    send: int
    recv: int
    count: int
    dtype: str
    op: str = ""
    root: int = 0

    def signature(self) -> tuple:
        return (self.kind, self.count, self.dtype, self.op, self.root)


class Group:
    """``nranks`` ranks that run collectives together, in the same order on every rank."""

    def __init__(self, nranks: int, timeout_s: float):
        self.nranks = nranks
        self.timeout_s = timeout_s
        self._barrier = threading.Barrier(nranks)
        self._calls: list[Call | None] = [None] * nranks
        self._result: torch.Tensor | None = None
        self._error: Exception | None = None

    def run(self, rank: int, call: Call) -> None:
        """Rank ``rank``'s part of ``call``; returns when its ``recv`` holds the result."""
        self._calls[rank] = call
        self._meet(rank, call)
        if rank == 0:
            self._result, self._error = None, None
            try:
                self._result = self._compute(self._calls)
            except Exception as exc:  # every rank raises it after the next barrier
                self._error = exc
        self._meet(rank, call)
        if self._error is not None:
            raise self._error
        if call.kind == "all_gather":
            view(call.recv, call.count * self.nranks, call.dtype).copy_(self._result)
        else:
            view(call.recv, call.count, call.dtype).copy_(self._result)

    def _meet(self, rank: int, call: Call) -> None:
        try:
            self._barrier.wait(self.timeout_s)
        except threading.BrokenBarrierError:
            raise CollectiveTimeoutError(
                f"hostdev: rank {rank} of {self.nranks} waited {self.timeout_s:g}s in {call.kind}: a peer "
                "failed or never called it (set ANYDEV_HOSTDEV_COLLECTIVE_TIMEOUT_S to wait longer)"
            ) from None

    def _compute(self, calls: list[Call]) -> torch.Tensor:
        first = calls[0]
        if any(c.signature() != first.signature() for c in calls):
            raise InvalidArgumentError(
                "hostdev: ranks called different collectives: " + "; ".join(str(c.signature()) for c in calls)
            )
        if first.count == 0:
            return torch.empty(0, dtype=TORCH_DTYPES[first.dtype])
        sends = [view(c.send, c.count, c.dtype) for c in calls]
        if first.kind == "broadcast":
            return sends[first.root].clone()
        if first.kind == "all_gather":
            return torch.cat(sends)
        return reduce(torch.stack(sends), first.op, sends[0].dtype)


def reduce(stacked: torch.Tensor, op: str, dtype: torch.dtype) -> torch.Tensor:
    """Reduce over dim 0 in a wide type (float32 or float64 for floats, int64 for ints), then cast back."""
    if dtype.is_floating_point:
        wide = stacked.to(torch.float64 if dtype == torch.float64 else torch.float32)
    else:
        wide = stacked.to(torch.int64)
    if op == "sum":
        out = wide.sum(0)
    elif op == "prod":
        out = wide.prod(0)
    elif op == "max":
        out = wide.amax(0)
    elif op == "min":
        out = wide.amin(0)
    elif op == "avg":
        out = wide.sum(0) / stacked.shape[0]
    else:
        raise InvalidArgumentError(f"hostdev: unknown reduce op {op!r}")
    return out.to(dtype)
