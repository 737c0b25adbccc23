"""Collectives between processes: a cpu communicator group over torch.distributed's gloo.

``comm_init_rank`` gives a process group when the ranks of a unique id live in different processes
(one process per rank, on one machine or several; see :mod:`.collectives`). Every collective runs on
the stream's worker as a gloo call on views of the device memory; reductions run in float64 (int64 for
integers) and round once at the end, as the in-process group does, so both give the same bits.

A peer process that dies makes the collectives waiting for it fail at once (gloo sees its sockets
close) with :class:`CollectiveError` naming the group's rank; one that hangs makes them fail after the
group's timeout (``ANYDEV_CPU_COLLECTIVE_TIMEOUT``).
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from ...plugin_api.errors import CollectiveTimeoutError
from ...plugin_api.types import DTYPE_SIZES
from .libc import byte_view

TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
    "float64": torch.float64, "int64": torch.int64, "int8": torch.int8, "uint8": torch.uint8,
}
_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.SUM}


class CollectiveError(CollectiveTimeoutError):
    """A collective across processes failed: a peer process died, hung past the timeout or left."""


class GlooGroup:
    """One process's rank of a group of processes; same ``run(rank, request)`` as the thread group."""

    def __init__(self, store, nranks: int, rank: int, timeout_s: float):
        self.nranks = nranks
        self.rank = rank
        self.timeout_s = timeout_s
        self._pg = dist.ProcessGroupGloo(store, rank, nranks, timedelta(seconds=timeout_s))

    def run(self, rank: int, request) -> None:
        """Run ``request`` (a :class:`.collectives.Request`) as this process's rank, on the stream worker."""
        try:
            getattr(self, "_" + request.kind)(request)
        except RuntimeError as exc:   # gloo's errors: a peer closed its connection, or the timeout
            raise CollectiveError(
                f"cpu {request.signature()} across processes: rank {self.rank} of {self.nranks} lost its "
                f"peers ({_first_line(exc)}); a peer process died or stopped calling collectives (the timeout "
                "is ANYDEV_CPU_COLLECTIVE_TIMEOUT). The group is unusable now; create new communicators."
            ) from exc

    def _all_reduce(self, request) -> None:
        send = _elements(request.send, request.count, request.dtype)
        wide = send.to(torch.float64 if send.is_floating_point() else torch.int64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = _REDUCE_OPS[request.op]
        self._pg.allreduce([wide], opts).wait()
        if request.op == "avg":
            wide = wide / self.nranks if wide.is_floating_point() else torch.div(wide, self.nranks, rounding_mode="trunc")
        _elements(request.recv, request.count, request.dtype).copy_(wide)

    def _all_gather(self, request) -> None:
        send = _elements(request.send, request.count, request.dtype).clone()   # recv may hold send (in place)
        parts = [torch.empty_like(send) for _ in range(self.nranks)]
        self._pg.allgather([parts], [send]).wait()
        _elements(request.recv, request.count * self.nranks, request.dtype).copy_(torch.cat(parts))

    def _broadcast(self, request) -> None:
        data = _elements(request.send if self.rank == request.root else request.recv, request.count, request.dtype).clone()
        opts = dist.BroadcastOptions()
        opts.rootRank = request.root
        self._pg.broadcast([data], opts).wait()
        _elements(request.recv, request.count, request.dtype).copy_(data)

    def close(self) -> None:
        self._pg = None


def _elements(address: int, count: int, dtype: str) -> torch.Tensor:
    return byte_view(address, count * DTYPE_SIZES[dtype]).view(TORCH_DTYPES[dtype])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
