"""``HostDevRuntime``: anydev's device-API contract implemented over host memory.

Each method below implements the call of the same name in ``anydev.plugin_api.DeviceRuntime``; the
docstrings there are the specification. What this backend maps each concept to:

* device memory: one libc region per virtual device, handed out by an ``Arena`` (``memory.py``);
* streams: a worker thread each, running enqueued work in order (``streams.py``);
* events: numbered records completed by the stream worker that reaches them;
* collectives: ranks are threads of this process, meeting at barriers (``collectives.py``);
* torch: memory is host memory, so the torch device is ``cpu``; inside ``torch_stream`` the stream
  runs inline, so torch math (which runs at once on the calling thread) stays in stream order.

Errors leave through ``runtime_error``: a ``RuntimeCallError`` carrying the backend, the call and this
runtime's own error name and code, as a binding over a C runtime reports its error codes.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
from typing import Sequence

import torch

from anydev.plugin_api import (
    BackendUnavailableError, CollectiveTimeoutError, CopyKind, DeviceRuntime, MemoryInfo, OutOfMemoryError,
    RuntimeCallError, RuntimeInfo,
)

from . import __version__, libc
from .collectives import Call, Group
from .memory import VirtualDeviceMemory, tensor_at
from .plugin import NAME
from .streams import Event, Stream

DEVICES_ENV = "ANYDEV_HOSTDEV_DEVICES"
MEMORY_ENV = "ANYDEV_HOSTDEV_MEMORY_MB"
TIMEOUT_ENV = "ANYDEV_HOSTDEV_COLLECTIVE_TIMEOUT_S"

#: This runtime's error codes, named as a C runtime names them (the values follow CUDA's).
ERROR_CODES = {"InvalidValue": 1, "MemoryAllocation": 2, "InvalidDevice": 101, "InvalidResourceHandle": 400,
               "NotReady": 600}


def runtime_error(call: str, error: str, message: str, error_type=RuntimeCallError) -> RuntimeCallError:
    return error_type(NAME, call, ERROR_CODES[error], f"hostdevError{error}", message)


def _env_number(name: str, default, kind=int):
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise BackendUnavailableError(NAME, f"{name}={text!r} is not a positive {kind.__name__}", [name])
    return value


class HostDevRuntime(DeviceRuntime):
    torch_device_type = "cpu"
    hardware_label = "host CPU (hostdev example backend)"
    cross_process_collectives = False   # its groups are threads of one process

    def __init__(self):
        self.num_devices = _env_number(DEVICES_ENV, 4)
        self.memory_mb = _env_number(MEMORY_ENV, 1024)
        self.collective_timeout_s = _env_number(TIMEOUT_ENV, 60.0, float)
        self._memory = [VirtualDeviceMemory(i, self.memory_mb << 20) for i in range(self.num_devices)]
        self._host_allocations: dict[int, int] = {}
        self._streams: dict[int, Stream] = {}
        self._events: dict[int, Event] = {}
        self._comms: dict[int, tuple[Group, int]] = {}  # handle -> (group, rank)
        self._joining: dict[bytes, _Rendezvous] = {}
        self._handles = itertools.count(1)  # 0 is never a valid handle
        self._lock = threading.Lock()
        self._thread = threading.local()

    # ---- devices -------------------------------------------------------------------------
    def device_count(self) -> int:
        return self.num_devices

    def set_device(self, index: int) -> None:
        self._check_device("set_device", index)
        self._thread.device = index

    def get_device(self) -> int:
        return getattr(self._thread, "device", 0)

    def device_synchronize(self) -> None:
        for stream in self._streams_of(self.get_device()):
            stream.synchronize()

    def memory_info(self) -> MemoryInfo:
        memory = self._memory[self.get_device()]
        return MemoryInfo(free=memory.free_bytes(), total=memory.size)

    # ---- memory --------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        if nbytes == 0:
            return 0
        memory = self._memory[self.get_device()]
        arena = memory.arena()
        address = arena.alloc(nbytes) if arena else None
        if address is None:
            raise runtime_error(
                "malloc", "MemoryAllocation",
                f"{nbytes} bytes do not fit on device {memory.index}: {memory.free_bytes()} of {memory.size} "
                f"bytes free (set {MEMORY_ENV} for larger devices)", OutOfMemoryError)
        return address

    def free(self, ptr: int) -> None:
        if ptr == 0:
            return
        memory = next((m for m in self._memory if m.owns(ptr)), None)
        if memory is None:
            raise runtime_error("free", "InvalidValue", f"{ptr:#x} is not device memory of this runtime")
        for stream in self._streams_of(memory.index):  # free is implicitly synchronising, as in CUDA
            stream.wait_idle()
        if not memory.arena().release(ptr):
            raise runtime_error("free", "InvalidValue", f"{ptr:#x} is not the start of a live allocation")

    def malloc_host(self, nbytes: int) -> int:
        if nbytes == 0:
            return 0
        address = libc.aligned_alloc(nbytes, 256)
        if not address:
            raise runtime_error("malloc_host", "MemoryAllocation", f"libc could not allocate {nbytes} bytes",
                                OutOfMemoryError)
        with self._lock:
            self._host_allocations[address] = nbytes
        return address

    def free_host(self, ptr: int) -> None:
        if ptr == 0:
            return
        with self._lock:
            known = self._host_allocations.pop(ptr, None)
        if known is None:
            raise runtime_error("free_host", "InvalidValue", f"{ptr:#x} was not returned by malloc_host")
        for stream in list(self._streams.values()):   # a queued copy may still read or write it, as cudaFreeHost waits
            stream.wait_idle()
        libc.release(ptr)

    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        target = self._stream("memset_async", stream)
        self._check_device_span("memset_async", ptr, nbytes)
        target.enqueue(functools.partial(libc.memset, ptr, value, nbytes))

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: CopyKind, stream: int) -> None:
        target = self._stream("memcpy_async", stream)
        try:
            kind = CopyKind(kind)
        except ValueError:
            raise runtime_error("memcpy_async", "InvalidValue", f"{kind!r} is not a CopyKind") from None
        if kind in (CopyKind.DEVICE_TO_HOST, CopyKind.DEVICE_TO_DEVICE):
            self._check_device_span("memcpy_async", src, nbytes)
        if kind in (CopyKind.HOST_TO_DEVICE, CopyKind.DEVICE_TO_DEVICE):
            self._check_device_span("memcpy_async", dst, nbytes)
        target.enqueue(functools.partial(libc.memmove, dst, src, nbytes))

    # ---- streams -------------------------------------------------------------------------
    def stream_create(self) -> int:
        handle = next(self._handles)
        self._streams[handle] = Stream(self.get_device(), name=f"hostdev{self.get_device()}-stream{handle}")
        return handle

    def stream_synchronize(self, stream: int) -> None:
        self._stream("stream_synchronize", stream).synchronize()

    def stream_wait_event(self, stream: int, event: int) -> None:
        target = self._stream("stream_wait_event", stream)
        source = self._event("stream_wait_event", event)
        record = source.last_record()
        if record:  # waiting on a never-recorded event is a no-op, as in CUDA
            target.enqueue(functools.partial(source.wait, record))

    def stream_destroy(self, stream: int) -> None:
        target = self._streams.pop(stream, None)
        if target is None:
            raise runtime_error("stream_destroy", "InvalidResourceHandle", f"{stream!r} is not a live stream")
        target.destroy()

    # ---- events --------------------------------------------------------------------------
    def event_create(self, timing: bool) -> int:
        handle = next(self._handles)
        self._events[handle] = Event(self.get_device(), timing)
        return handle

    def event_record(self, event: int, stream: int) -> None:
        target, on = self._event("event_record", event), self._stream("event_record", stream)
        if target.device != on.device:
            raise runtime_error("event_record", "InvalidResourceHandle",
                                f"an event of device {target.device} recorded on a stream of device {on.device}")
        target.record(on)

    def event_query(self, event: int) -> bool:
        return self._event("event_query", event).is_done()

    def event_synchronize(self, event: int) -> None:
        self._event("event_synchronize", event).wait()

    def event_elapsed_ms(self, start: int, end: int) -> float:
        first, last = self._event("event_elapsed_ms", start), self._event("event_elapsed_ms", end)
        if not (first.timing and last.timing):
            raise runtime_error("event_elapsed_ms", "InvalidResourceHandle", "both events need timing=True")
        if not (first.was_recorded() and last.was_recorded()):
            raise runtime_error("event_elapsed_ms", "InvalidResourceHandle", "both events must have been recorded")
        if first.completed_at is None or last.completed_at is None:
            raise runtime_error("event_elapsed_ms", "NotReady", "an event's recorded work has not finished yet")
        return (last.completed_at - first.completed_at) * 1000.0

    def event_destroy(self, event: int) -> None:
        if self._events.pop(event, None) is None:
            raise runtime_error("event_destroy", "InvalidResourceHandle", f"{event!r} is not a live event")

    # ---- collectives ---------------------------------------------------------------------
    def comm_init_all(self, devices: Sequence[int]) -> list[int]:
        for index in devices:
            self._check_device("comm_init_all", index)
        group = Group(len(devices), self.collective_timeout_s)
        return [self._add_comm(group, rank) for rank in range(len(devices))]

    def comm_unique_id(self) -> bytes:
        return os.urandom(128)

    def comm_init_rank(self, unique_id: bytes, nranks: int, rank: int) -> int:
        """Join a group of threads of this process (hostdev has no transport between processes)."""
        with self._lock:
            rendezvous = self._joining.setdefault(unique_id, _Rendezvous(nranks, self.collective_timeout_s))
            problem = rendezvous.claim(rank, nranks)
        if problem:
            raise runtime_error("comm_init_rank", "InvalidValue", problem)
        try:
            rendezvous.barrier.wait(self.collective_timeout_s)
        except threading.BrokenBarrierError:
            raise CollectiveTimeoutError(
                f"hostdev: comm_init_rank: rank {rank} of {nranks} waited {self.collective_timeout_s:g}s for the "
                "other ranks; they must be threads of this same process") from None
        with self._lock:
            self._joining.pop(unique_id, None)
        return self._add_comm(rendezvous.group, rank)

    def comm_destroy(self, comm: int) -> None:
        if self._comms.pop(comm, None) is None:
            raise runtime_error("comm_destroy", "InvalidResourceHandle", f"{comm!r} is not a live communicator")

    def all_reduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        self._enqueue_collective("all_reduce", comm, stream, Call("all_reduce", send, recv, count, dtype, op=op))

    def all_gather(self, send, recv, count, dtype, comm, stream) -> None:
        self._enqueue_collective("all_gather", comm, stream, Call("all_gather", send, recv, count, dtype))

    def broadcast(self, send, recv, count, dtype, root, comm, stream) -> None:
        self._enqueue_collective("broadcast", comm, stream, Call("broadcast", send, recv, count, dtype, root=root))

    # ---- torch bridge --------------------------------------------------------------------
    def torch_device(self, index: int):
        return torch.device("cpu")

    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object):
        return tensor_at(ptr, nbytes, owner)

    @contextlib.contextmanager
    def torch_stream(self, stream: int, index: int):
        target = self._stream("torch_stream", stream)
        target.begin_inline()
        try:
            yield
        finally:
            target.end_inline()

    # ---- optional ------------------------------------------------------------------------
    def runtime_info(self) -> RuntimeInfo:
        return RuntimeInfo(
            runtime_version=f"anydev-hostdev {__version__}", driver_version="n/a (host memory)",
            collective_library="in-process (threads)", collective_version=__version__,
            notes=f"{self.num_devices} virtual devices of {self.memory_mb} MiB ({DEVICES_ENV}, {MEMORY_ENV})",
        )

    def close(self) -> None:
        errors = []
        for handle in list(self._streams):
            try:
                self._streams.pop(handle).destroy()
            except Exception as exc:  # raised below, after the memory is released
                errors.append(exc)
        for memory in self._memory:
            memory.release_region_if_unused()
        with self._lock:
            host, self._host_allocations = self._host_allocations, {}
        for address in host:
            libc.release(address)
        if errors:
            raise errors[0]

    # ---- helpers -------------------------------------------------------------------------
    def _check_device(self, call: str, index) -> None:
        if not isinstance(index, int) or not 0 <= index < self.num_devices:
            raise runtime_error(call, "InvalidDevice",
                                f"device {index!r} does not exist; there are {self.num_devices} (set {DEVICES_ENV})")

    def _stream(self, call: str, handle: int) -> Stream:
        stream = self._streams.get(handle)
        if stream is None:
            raise runtime_error(call, "InvalidResourceHandle", f"{handle!r} is not a live stream")
        return stream

    def _event(self, call: str, handle: int) -> Event:
        event = self._events.get(handle)
        if event is None:
            raise runtime_error(call, "InvalidResourceHandle", f"{handle!r} is not a live event")
        return event

    def _comm(self, call: str, handle: int) -> tuple[Group, int]:
        comm = self._comms.get(handle)
        if comm is None:
            raise runtime_error(call, "InvalidResourceHandle", f"{handle!r} is not a live communicator")
        return comm

    def _add_comm(self, group: Group, rank: int) -> int:
        handle = next(self._handles)
        self._comms[handle] = (group, rank)
        return handle

    def _streams_of(self, device: int) -> list[Stream]:
        return [s for s in list(self._streams.values()) if s.device == device]

    def _check_device_span(self, call: str, address: int, nbytes: int) -> None:
        if nbytes and not any(m.holds(address, nbytes) for m in self._memory):
            raise runtime_error(call, "InvalidValue",
                                f"[{address:#x}, +{nbytes}) is not inside one live device allocation")

    def _enqueue_collective(self, call: str, comm: int, stream: int, args: Call) -> None:
        group, rank = self._comm(call, comm)
        if args.dtype not in self.collective_dtypes:
            raise runtime_error(call, "InvalidValue", f"dtype {args.dtype!r} is not one of {self.collective_dtypes}")
        if args.op and args.op not in self.reduce_ops:
            raise runtime_error(call, "InvalidValue", f"reduce op {args.op!r} is not one of {self.reduce_ops}")
        self._stream(call, stream).enqueue(functools.partial(group.run, rank, args))


class _Rendezvous:
    """The ranks that have joined one unique id so far."""

    def __init__(self, nranks: int, timeout_s: float):
        self.nranks = nranks
        self.group = Group(nranks, timeout_s)
        self.barrier = threading.Barrier(nranks)
        self.ranks: set[int] = set()

    def claim(self, rank: int, nranks: int) -> str | None:
        """Take ``rank``; a message when the call does not fit this group."""
        if nranks != self.nranks:
            return f"this unique id's group has {self.nranks} ranks, not {nranks}"
        if not 0 <= rank < nranks or rank in self.ranks:
            return f"rank {rank} is out of range or already joined"
        self.ranks.add(rank)
        return None
