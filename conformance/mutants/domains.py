"""Mutants wrong only in a part of an argument's domain that the older checks do not reach: each is
right at the points those checks use and wrong elsewhere in what the contract allows; the domain
checks (``test_*_domains.py``) catch them."""
from __future__ import annotations

import bisect
import ctypes
import threading

from anydev.backends.cpu import collectives
from anydev.backends.cpu.runtime import CpuRuntime, _Communicator
from anydev.plugin_api.types import DTYPE_SIZES, CopyKind

from . import mutant


@mutant("memset-unaligned-ragged-tail", checks=["test_memory_domains.py"])
class MemsetUnalignedRaggedTail(CpuRuntime):
    """memset_async at an address that is not 4-byte aligned, of a length that is not a multiple of 4,
    leaves the last 1-3 bytes unset (a word-wide fast path with a wrong tail): right for whole
    buffers and for aligned or whole-word ranges."""

    def memset_async(self, ptr, value, nbytes, stream):
        if ptr % 4 and nbytes % 4:
            nbytes -= nbytes % 4
        super().memset_async(ptr, value, nbytes, stream)


@mutant("d2d-copy-ignores-src-offset", checks=["test_memory_domains.py"])
class DeviceToDeviceCopyIgnoresSourceOffset(CpuRuntime):
    """memcpy_async device-to-device reads from the start of the source allocation, whatever the
    offset into it: right for whole buffers and for host copies at any offset."""

    def memcpy_async(self, dst, src, nbytes, kind, stream):
        if CopyKind(kind) == CopyKind.DEVICE_TO_DEVICE and nbytes:
            starts = self._memory._device_starts
            src = starts[bisect.bisect_right(starts, src) - 1]
        super().memcpy_async(dst, src, nbytes, kind, stream)


@mutant("malloc-overlaps-after-out-of-order-free", checks=["test_memory_domains.py"])
class MallocOverlapsAfterOutOfOrderFree(CpuRuntime):
    """After a free that is not of the newest live allocation, the next allocation that fits in the
    newest one is given that still-live memory (a free list corrupted by out-of-order frees): right
    when buffers are freed newest first, or all at the end."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._live: list[tuple[int, int]] = []   # (address, nbytes), oldest first
        self._aliases: dict[int, int] = {}       # address -> how many extra holders
        self._corrupted = False

    def malloc(self, nbytes):
        if self._corrupted and nbytes and self._live and self._live[-1][1] >= nbytes:
            self._corrupted = False
            address = self._live[-1][0]
            self._aliases[address] = self._aliases.get(address, 0) + 1
            return address
        address = super().malloc(nbytes)
        if address:
            self._live.append((address, nbytes))
        return address

    def free(self, ptr):
        if self._aliases.get(ptr):
            self._aliases[ptr] -= 1
            return
        entry = next((e for e in self._live if e[0] == ptr), None)
        if entry is not None:
            self._corrupted = entry is not self._live[-1]
            self._live.remove(entry)
        super().free(ptr)


COLLECTIVE_DOMAINS = ["test_collectives_domains.py"]


@mutant("broadcast-from-the-last-rank", checks=COLLECTIVE_DOMAINS)
class BroadcastFromTheLastRank(CpuRuntime):
    """broadcast sends the last rank's data whatever the root: right for root nranks - 1, the root
    the older checks use."""

    def broadcast(self, send, recv, count, dtype, root, comm, stream):
        nranks = self._comm("broadcast", comm).group.nranks
        super().broadcast(send, recv, count, dtype, nranks - 1, comm, stream)


@mutant("all-reduce-int8-unsigned", checks=COLLECTIVE_DOMAINS)
class AllReduceInt8Unsigned(CpuRuntime):
    """all_reduce of int8 reduces the bytes as uint8 (a wrong element type in an optional dtype): the
    sum's bits are right, max and min of negative values wrong; every required dtype right."""

    def all_reduce(self, send, recv, count, dtype, op, comm, stream):
        super().all_reduce(send, recv, count, "uint8" if dtype == "int8" else dtype, op, comm, stream)


@mutant("all-reduce-writes-a-whole-vector", checks=COLLECTIVE_DOMAINS)
class AllReduceWritesAWholeVector(CpuRuntime):
    """all_reduce processes whole vectors of 8 elements, writing up to 7 elements past ``count`` in
    recv (and reading past it in send): right for buffers sized exactly, wrong for whatever lies after
    the range."""

    def all_reduce(self, send, recv, count, dtype, op, comm, stream):
        super().all_reduce(send, recv, -(-count // 8) * 8, dtype, op, comm, stream)


@mutant("comm-init-all-ranks-in-device-order", checks=COLLECTIVE_DOMAINS)
class CommInitAllRanksInDeviceOrder(CpuRuntime):
    """comm_init_all gives the rank of a device's position in the sorted device list, not in the list
    as given (rank i on devices[i]): right whenever the devices are listed in order."""

    def comm_init_all(self, devices):
        devices = list(devices)
        super().comm_init_all(devices)  # its checks; the communicators it made are replaced below
        group = collectives.Group(len(devices), self.collective_timeout_s)
        ranked = sorted(devices)
        return [self._add_comm(_Communicator(group, ranked.index(device), device)) for device in devices]


@mutant("comm-init-rank-in-arrival-order", checks=COLLECTIVE_DOMAINS)
class CommInitRankInArrivalOrder(CpuRuntime):
    """comm_init_rank gives each caller the rank of its arrival at the unique id, not the rank it
    asked for (a bootstrap that numbers ranks as they connect): right whenever the ranks join in
    rank order, as threads started together usually do."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._arrivals: dict[bytes, int] = {}
        self._arrivals_lock = threading.Lock()

    def comm_init_rank(self, unique_id, nranks, rank):
        with self._arrivals_lock:
            arrived = self._arrivals.get(unique_id, 0)
            self._arrivals[unique_id] = arrived + 1
        return super().comm_init_rank(unique_id, nranks, arrived % nranks)


STREAM_DOMAINS = ["test_streams_events_domains.py"]


@mutant("event-record-keeps-the-first", checks=STREAM_DOMAINS)
class EventRecordKeepsTheFirst(CpuRuntime):
    """event_record of an event recorded before does nothing (the first record decides for ever):
    right for events recorded once, as every older check records them."""

    def event_record(self, event, stream):
        if self._event("event_record", event).generation:
            self._stream("event_record", stream)
            return
        super().event_record(event, stream)


@mutant("wait-event-ignored-across-devices", checks=STREAM_DOMAINS)
class WaitEventIgnoredAcrossDevices(CpuRuntime):
    """stream_wait_event on an event of another device does not make the stream wait: right for
    events of the stream's own device."""

    def stream_wait_event(self, stream, event):
        if self._event("stream_wait_event", event).device != self._stream("stream_wait_event", stream).device:
            return
        super().stream_wait_event(stream, event)


@mutant("torch-stream-clears-queued-errors", checks=STREAM_DOMAINS)
class TorchStreamClearsQueuedErrors(CpuRuntime):
    """torch_stream waits for the stream on entry and clears the error its queued work left (a
    bridge that resets the runtime's last error when it switches streams): the error is lost; right
    when nothing failed."""

    def torch_stream(self, stream, index):
        self._check_device(index)
        worker = self._stream("torch_stream", stream)

        def wait_and_clear():
            worker.wait_idle()
            worker.error = None

        return self._torch_streams.block(stream, wait_and_clear)


class _RecvFault(CpuRuntime):
    """A cpu runtime whose recv runs ``_recv(group, rank, peer, address, count, dtype)`` instead."""

    @staticmethod
    def _recv(group, rank, peer, address, count, dtype):
        group.recv(rank, peer, address, count, dtype)

    @classmethod
    def _mover(cls, kind, group):
        if kind == "send":
            return group.send
        return lambda rank, peer, address, count, dtype: cls._recv(group, rank, peer, address, count, dtype)


@mutant("recv-of-0-elements-writes-one", checks=["test_send_recv_domains.py"])
class RecvOfZeroElementsWritesOne(_RecvFault):
    """recv of 0 elements zeroes one element at its address (a length rounded up to one element):
    right at every count above 0."""

    @staticmethod
    def _recv(group, rank, peer, address, count, dtype):
        group.recv(rank, peer, address, count, dtype)
        if count == 0:
            ctypes.memset(address, 0, DTYPE_SIZES[dtype])


@mutant("recv-from-a-non-neighbour-drops-the-last-element", checks=["test_send_recv_domains.py"])
class RecvFromANonNeighbourDropsTheLastElement(_RecvFault):
    """recv from a rank that is not a ring neighbour (rank +- 1) leaves the message's last element
    unwritten (a relayed path with an off-by-one): right for rings and chains, the pairings every
    older check uses."""

    @staticmethod
    def _recv(group, rank, peer, address, count, dtype):
        n = group.nranks
        if count == 0 or peer in ((rank + 1) % n, (rank - 1) % n):
            group.recv(rank, peer, address, count, dtype)
            return
        last = address + (count - 1) * DTYPE_SIZES[dtype]
        kept = ctypes.string_at(last, DTYPE_SIZES[dtype])
        group.recv(rank, peer, address, count, dtype)
        ctypes.memmove(last, kept, len(kept))
