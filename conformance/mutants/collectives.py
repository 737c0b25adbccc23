"""Mutants of the collectives: wrong results (always, above a size, for one dtype), rank order,
the broadcast root, and stream order."""
from __future__ import annotations

import ctypes

from anydev.backends.cpu.runtime import CpuRuntime
from anydev.backends.cpu.streams import StreamWorker
from anydev.plugin_api.types import DTYPE_SIZES

from . import mutant

MiB = 1 << 20


def _enqueue_copy(runtime: CpuRuntime, stream: int, call: str, dst: int, src: int, nbytes: int) -> None:
    worker = runtime._stream(call, stream)
    if dst != src and nbytes:
        runtime._enqueue(stream, worker, call, lambda: ctypes.memmove(dst, src, nbytes))


@mutant("all-reduce-local", checks=["test_collectives.py"])
class AllReduceReturnsLocal(CpuRuntime):
    """all_reduce returns each rank's own input instead of the reduction over ranks."""

    def all_reduce(self, send, recv, count, dtype, op, comm, stream):
        self._comm("all_reduce", comm)
        _enqueue_copy(self, stream, "all_reduce", recv, send, count * DTYPE_SIZES[dtype])


@mutant("all-reduce-wrong-above-1mib", checks=["test_collectives.py::test_collectives_at_64_mib"])
class AllReduceWrongAboveOneMiB(CpuRuntime):
    """all_reduce reduces only the first 1 MiB; beyond it each rank keeps its own input."""

    def all_reduce(self, send, recv, count, dtype, op, comm, stream):
        size = DTYPE_SIZES[dtype]
        head = min(count, MiB // size)
        super().all_reduce(send, recv, head, dtype, op, comm, stream)
        if count > head:
            _enqueue_copy(self, stream, "all_reduce", recv + head * size, send + head * size, (count - head) * size)


@mutant("all-reduce-bf16-wrong", checks=["test_collectives.py"])
class AllReduceBfloat16AsFloat16(CpuRuntime):
    """all_reduce maps bfloat16 to float16 (same size, other bits): wrong only for bfloat16."""

    def all_reduce(self, send, recv, count, dtype, op, comm, stream):
        super().all_reduce(send, recv, count, "float16" if dtype == "bfloat16" else dtype, op, comm, stream)


@mutant("all-gather-reversed", checks=["test_collectives.py"])
class AllGatherRanksReversed(CpuRuntime):
    """all_gather places rank r's part at position nranks-1-r."""

    def all_gather(self, send, recv, count, dtype, comm, stream):
        super().all_gather(send, recv, count, dtype, comm, stream)
        nranks = self._comm("all_gather", comm).group.nranks
        part = count * DTYPE_SIZES[dtype]

        def reverse_parts():
            data = ctypes.string_at(recv, nranks * part)
            for r in range(nranks):
                ctypes.memmove(recv + (nranks - 1 - r) * part, data[r * part:(r + 1) * part], part)

        if nranks > 1 and part:
            self._enqueue(stream, self._stream("all_gather", stream), "all_gather", reverse_parts)


@mutant("broadcast-root-0", checks=["test_collectives.py"])
class BroadcastFromRankZero(CpuRuntime):
    """broadcast checks root and then broadcasts from rank 0 whatever the root."""

    def broadcast(self, send, recv, count, dtype, root, comm, stream):
        super().broadcast(send, recv, count, dtype, 0, comm, stream)


@mutant("collectives-off-stream", checks=["test_collectives.py::test_collectives_run_in_stream_order",
                                          "test_collectives.py::test_all_reduce"])
class CollectivesOutsideStreamOrder(CpuRuntime):
    """Collectives run at once on a queue of their communicator's own, not in the order of the
    stream they are enqueued on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._comm_queues: dict[int, StreamWorker] = {}

    def _enqueue_collective(self, request, comm, stream):
        communicator = self._comm(request.kind, comm)
        self._stream(request.kind, stream)
        queue = self._comm_queues.get(comm)
        if queue is None:
            queue = self._comm_queues[comm] = StreamWorker(-comm, communicator.device)
        queue.enqueue(request.kind, lambda: communicator.group.run(communicator.rank, request))



@mutant("all-gather-wrong-beyond-2-ranks", checks=["test_collectives.py::test_all_gather"])
class AllGatherWrongBeyondTwoRanks(CpuRuntime):
    """all_gather is right on 1 and 2 ranks; on 3 or more it swaps the parts of the last two ranks
    (caught only where collectives run at 3 ranks or more)."""

    def all_gather(self, send, recv, count, dtype, comm, stream):
        super().all_gather(send, recv, count, dtype, comm, stream)
        nranks = self._comm("all_gather", comm).group.nranks
        part = count * DTYPE_SIZES[dtype]

        def swap_last_two():
            last, before = recv + (nranks - 1) * part, recv + (nranks - 2) * part
            data = ctypes.string_at(before, 2 * part)
            ctypes.memmove(before, data[part:], part)
            ctypes.memmove(last, data[:part], part)

        if nranks > 2 and part:
            self._enqueue(stream, self._stream("all_gather", stream), "all_gather", swap_last_two)
