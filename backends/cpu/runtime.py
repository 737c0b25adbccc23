"""``CpuRuntime``: the contract implemented on the host CPU, with virtual devices."""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from ... import __version__
from ...plugin_api.errors import ClosedError, CollectiveAbortedError, InvalidArgumentError
from ...plugin_api.host_torch_streams import HostTorchStreams
from ...plugin_api.kernel_offers import KernelOffer
from ...plugin_api.objects.memory import host_array
from ...plugin_api.runtime import DeviceRuntime
from ...plugin_api.types import CopyKind, MemoryInfo, RuntimeInfo
from . import NAME, collectives
from .config import CpuConfig
from .errors import INVALID_HANDLE, INVALID_VALUE, NOT_READY, call_error
from .libc import load_libc, pointer
from .memory import MemoryTable
from .streams import CpuEvent, StreamWorker

_DEVICE_SIDES = {  # which ends of a copy are device memory: (dst, src)
    CopyKind.HOST_TO_HOST: (False, False), CopyKind.HOST_TO_DEVICE: (True, False),
    CopyKind.DEVICE_TO_HOST: (False, True), CopyKind.DEVICE_TO_DEVICE: (True, True),
}


@dataclass(frozen=True)
class _Communicator:
    group: object   # collectives.Group (threads of this process) or gloo.GlooGroup (processes)
    rank: int
    device: int


class CpuRuntime(DeviceRuntime):
    """Virtual devices in host memory. Settings come from ``CpuConfig`` (by default the environment).

    ``collective_timeout_s`` may be changed on the instance; it applies to groups created afterwards.
    """

    name = NAME   # the plugin's, also for runtimes built outside the registry (tests)
    torch_device_type = "cpu"
    hardware_label = "host CPU (virtual devices)"
    collective_dtypes = ("float32", "float16", "bfloat16", "int32", "float64", "int64", "int8", "uint8")
    reduce_ops = ("sum", "prod", "max", "min", "avg")

    def __init__(self, config: CpuConfig | None = None):
        self.config = config or CpuConfig.from_env()
        self.collective_timeout_s = self.config.collective_timeout_s
        self._libc, self._libc_name = load_libc()
        self._memory = MemoryTable(self._libc, self.config.num_devices, self.config.device_memory)
        self._current = threading.local()
        self._torch_streams = HostTorchStreams()
        self._new_handle = itertools.count(1).__next__
        self._streams: dict[int, StreamWorker] = {}
        self._events: dict[int, CpuEvent] = {}
        self._comms: dict[int, _Communicator] = {}
        self._aborted: set[int] = set()   # communicators aborted and not yet destroyed
        self._closed = False

    # ---- devices -------------------------------------------------------------------------
    def device_count(self) -> int:
        return self.config.num_devices

    def set_device(self, index: int) -> None:
        self._check_device(index)
        self._current.index = index

    def get_device(self) -> int:
        return getattr(self._current, "index", 0)

    def device_synchronize(self) -> None:
        workers = self._workers_on(self._current_device())
        for worker in workers:
            worker.wait_idle()
        for worker in workers:
            worker.raise_error()

    def memory_info(self) -> MemoryInfo:
        device = self._current_device()
        return MemoryInfo(free=self._memory.free_bytes(device), total=self._memory.capacity)

    # ---- memory --------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        _check_nbytes(nbytes)
        return self._memory.alloc_device(self._current_device(), int(nbytes))

    def free(self, ptr: int) -> None:
        """Waits for the owning device's streams first (as cudaFree does), so no queued copy outlives the memory."""
        if ptr == 0:
            return
        for worker in self._workers_on(self._memory.device_of("free", ptr)):
            worker.wait_idle()
        self._memory.free_device(ptr)

    def malloc_host(self, nbytes: int) -> int:
        _check_nbytes(nbytes)
        self._check_open()
        return self._memory.alloc_host(int(nbytes))

    def free_host(self, ptr: int) -> None:
        if ptr == 0:
            return
        for worker in list(self._streams.values()):
            worker.wait_idle()
        self._memory.free_host(ptr)

    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        worker = self._stream("memset_async", stream)
        _check_nbytes(nbytes)
        if not isinstance(value, (int, np.integer)) or not 0 <= value <= 255:
            raise InvalidArgumentError(f"memset value must be a byte (0..255), got {value!r}")
        self._memory.check_device_range("memset_async", ptr, nbytes)
        if nbytes:
            self._enqueue(stream, worker, "memset_async", lambda: self._libc.memset(pointer(ptr), int(value), nbytes))

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: CopyKind, stream: int) -> None:
        """Device ends of the copy (by ``kind``) must lie in live allocations; host ends are the caller's."""
        worker = self._stream("memcpy_async", stream)
        _check_nbytes(nbytes)
        try:
            dst_is_device, src_is_device = _DEVICE_SIDES[CopyKind(kind)]
        except ValueError:
            raise InvalidArgumentError(f"copy kind {kind!r} is not one of {[k.name for k in CopyKind]}") from None
        if dst_is_device:
            self._memory.check_device_range("memcpy_async", dst, nbytes)
        if src_is_device:
            self._memory.check_device_range("memcpy_async", src, nbytes)
        if nbytes:
            self._enqueue(stream, worker, "memcpy_async", lambda: self._libc.memcpy(pointer(dst), pointer(src), nbytes))

    # ---- streams -------------------------------------------------------------------------
    def stream_create(self) -> int:
        device = self._current_device()
        handle = self._new_handle()
        self._streams[handle] = StreamWorker(handle, device)
        return handle

    def stream_synchronize(self, stream: int) -> None:
        self._stream("stream_synchronize", stream).synchronize()

    def stream_wait_event(self, stream: int, event: int) -> None:
        worker = self._stream("stream_wait_event", stream)
        worker.enqueue_wait(self._event("stream_wait_event", event))

    def stream_destroy(self, stream: int) -> None:
        """Queued work still runs; an error of the stream that nobody has synchronized on is raised here."""
        worker = self._stream("stream_destroy", stream)
        self._streams.pop(stream, None)
        unreported = worker.stop()
        if unreported is not None:
            raise unreported

    # ---- events --------------------------------------------------------------------------
    def event_create(self, timing: bool) -> int:
        device = self._current_device()
        handle = self._new_handle()
        self._events[handle] = CpuEvent(device, bool(timing))
        return handle

    def event_record(self, event: int, stream: int) -> None:
        target = self._event("event_record", event)
        worker = self._stream("event_record", stream)
        if target.device != worker.device:
            raise call_error(
                "event_record", INVALID_HANDLE,
                f"event of cpu:{target.device} recorded on a stream of cpu:{worker.device}; use an event of the stream's device",
            )
        worker.enqueue_record(target)

    def event_query(self, event: int) -> bool:
        return self._event("event_query", event).is_done()

    def event_synchronize(self, event: int) -> None:
        self._event("event_synchronize", event).wait()

    def event_elapsed_ms(self, start: int, end: int) -> float:
        events = (self._event("event_elapsed_ms", start), self._event("event_elapsed_ms", end))
        for which, ev in zip(("start", "end"), events):
            if not ev.timing:
                raise call_error("event_elapsed_ms", INVALID_HANDLE, f"the {which} event was created without timing")
            if ev.generation == 0:
                raise call_error("event_elapsed_ms", INVALID_HANDLE, f"the {which} event was never recorded")
            if not ev.is_done():
                raise call_error("event_elapsed_ms", NOT_READY, f"the {which} event has not completed yet")
        return (events[1].completed_at - events[0].completed_at) * 1000.0

    def event_destroy(self, event: int) -> None:
        self._event("event_destroy", event)
        self._events.pop(event, None)

    # ---- collectives ---------------------------------------------------------------------
    def comm_init_all(self, devices: Sequence[int]) -> list[int]:
        self._check_open()
        devices = list(devices)
        if not devices:
            raise InvalidArgumentError("comm_init_all needs at least one device")
        for index in devices:
            self._check_device(index)
        if len(set(devices)) != len(devices):
            raise InvalidArgumentError(f"comm_init_all: each rank needs its own device, got {devices}")
        group = collectives.Group(len(devices), self.collective_timeout_s)
        return [self._add_comm(_Communicator(group, rank, device)) for rank, device in enumerate(devices)]

    def comm_unique_id(self) -> bytes:
        self._check_open()
        return collectives.new_unique_id(self.collective_timeout_s)

    def comm_init_rank(self, unique_id: bytes, nranks: int, rank: int) -> int:
        """Joins the group: threads of this process, or processes through gloo (see ``collectives``);
        blocks until all ranks have joined (or times out)."""
        device = self._current_device()
        if not isinstance(nranks, int) or nranks < 1:
            raise InvalidArgumentError(f"nranks must be a positive int, got {nranks!r}")
        if not isinstance(rank, int) or not 0 <= rank < nranks:
            raise InvalidArgumentError(f"rank {rank!r} is outside 0..{nranks - 1}")
        group = collectives.join(unique_id, nranks, rank, self.collective_timeout_s)
        return self._add_comm(_Communicator(group, rank, device))

    def comm_destroy(self, comm: int) -> None:
        communicator = self._comm("comm_destroy", comm, aborted_ok=True)
        self._comms.pop(comm, None)
        self._aborted.discard(comm)
        if hasattr(communicator.group, "close"):   # a process group: one communicator per process
            communicator.group.close()

    def comm_abort(self, comm: int) -> None:
        """Ends the group's waits at once (an in-process group: for every rank; see ``collectives``)."""
        communicator = self._comm("comm_abort", comm)
        self._aborted.add(comm)
        if isinstance(communicator.group, collectives.Group):
            communicator.group.abort(communicator.rank)
        else:
            communicator.group.abort()

    def all_reduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        if op not in self.reduce_ops:
            raise InvalidArgumentError(f"cpu: reduce op {op!r} is not one of {self.reduce_ops}")
        self._enqueue_collective(collectives.Request("all_reduce", send, recv, count, dtype, op=op), comm, stream)

    def all_gather(self, send, recv, count, dtype, comm, stream) -> None:
        self._enqueue_collective(collectives.Request("all_gather", send, recv, count, dtype), comm, stream)

    def broadcast(self, send, recv, count, dtype, root, comm, stream) -> None:
        communicator = self._comm("broadcast", comm)
        if not isinstance(root, int) or not 0 <= root < communicator.group.nranks:
            raise InvalidArgumentError(f"broadcast root {root!r} is outside 0..{communicator.group.nranks - 1}")
        self._enqueue_collective(collectives.Request("broadcast", send, recv, count, dtype, root=root), comm, stream)

    # ---- point-to-point (contract 1.3) ----------------------------------------------------
    def send(self, send, count, dtype, peer, comm, stream) -> None:
        self._point_to_point("send", send, count, dtype, peer, comm, stream)

    def recv(self, recv, count, dtype, peer, comm, stream) -> None:
        self._point_to_point("recv", recv, count, dtype, peer, comm, stream)

    def group_start(self) -> None:
        self._check_open()
        self._current.p2p_depth = getattr(self._current, "p2p_depth", 0) + 1
        if self._current.p2p_depth == 1:
            self._current.p2p_calls = []

    def group_end(self) -> None:
        """Issues the group: on each of its streams one operation that posts the group's sends, then
        runs its recvs (sends never wait here, so no call of the group waits for another)."""
        depth = getattr(self._current, "p2p_depth", 0)
        if depth == 0:
            raise call_error("group_end", INVALID_VALUE, "group_end without a group_start on this thread")
        self._current.p2p_depth = depth - 1
        if depth > 1:
            return
        calls, self._current.p2p_calls = self._current.p2p_calls, []
        by_stream: dict[int, list] = {}
        for kind, stream, worker, work in calls:
            by_stream.setdefault(stream, [worker, [], []])[1 if kind == "send" else 2].append(work)
        for stream, (worker, sends, recvs) in by_stream.items():   # every stream's part first...
            self._enqueue(stream, worker, "group_end", lambda ops=sends + recvs: [op() for op in ops], wait=False)
        for stream, (worker, _, _) in by_stream.items():             # ...then wait where torch reads next
            if self._torch_streams.inside(stream):
                worker.synchronize()

    def _point_to_point(self, kind: str, address: int, count: int, dtype: str, peer: int, comm: int, stream: int) -> None:
        communicator = self._comm(kind, comm)
        worker = self._stream(kind, stream)
        if dtype not in self.collective_dtypes:
            raise InvalidArgumentError(f"cpu: {kind} does not support {dtype!r}; supported: {self.collective_dtypes}")
        _check_nbytes(count, "count")
        nranks = communicator.group.nranks
        if not isinstance(peer, int) or not 0 <= peer < nranks or peer == communicator.rank:
            raise InvalidArgumentError(f"cpu {kind}: peer {peer!r} must be another rank of the group (0..{nranks - 1})")
        move = self._mover(kind, communicator.group)

        def work():
            move(communicator.rank, peer, address, count, dtype)

        if getattr(self._current, "p2p_depth", 0):
            self._current.p2p_calls.append((kind, stream, worker, work))
        else:
            self._enqueue(stream, worker, kind, work)

    @staticmethod
    def _mover(kind: str, group: collectives.Group):
        """What a ``kind`` call runs on its stream: ``move(rank, peer, address, count, dtype)``."""
        return group.send if kind == "send" else group.recv

    def _enqueue_collective(self, request: collectives.Request, comm: int, stream: int) -> None:
        communicator = self._comm(request.kind, comm)
        worker = self._stream(request.kind, stream)
        if request.dtype not in self.collective_dtypes:
            raise InvalidArgumentError(f"cpu: collectives do not support {request.dtype!r}; supported: {self.collective_dtypes}")
        _check_nbytes(request.count, "count")
        self._enqueue(stream, worker, request.kind, lambda: communicator.group.run(communicator.rank, request))

    def _enqueue(self, stream: int, worker, call: str, work, wait: bool = True) -> None:
        """Queue ``work`` on the stream; inside this thread's ``torch_stream(stream)`` block, also wait
        for it, because the torch math that follows on this thread reads its result at once. Inside
        this thread's capture of a device graph on the stream (``graphs.py``), record it instead."""
        recording = getattr(self._current, "capturing", {}).get(stream)
        if recording is not None:
            recording.append(work)
            return
        worker.enqueue(call, work)
        if wait and self._torch_streams.inside(stream):
            worker.synchronize()

    # ---- torch bridge --------------------------------------------------------------------
    def torch_device(self, index: int):
        self._check_device(index)
        return torch.device("cpu")

    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object):
        """A zero-copy ``uint8`` CPU tensor over a live device allocation; it keeps ``owner`` alive."""
        self._check_device(index)
        _check_nbytes(nbytes)
        self._memory.check_device_range("tensor_from_pointer", ptr, nbytes)
        return torch.from_numpy(host_array(ptr, nbytes, owner))

    def torch_stream(self, stream: int, index: int) -> contextlib.AbstractContextManager:
        """Orders torch CPU math and this stream's work as if both ran on one stream.

        torch CPU math runs synchronously on the calling thread. So on entry the stream is synchronized
        (the math sees earlier work's results), and inside the block every memset, copy or collective
        this thread puts on the stream is waited for before the call returns (the next torch line may
        read its result). Work queued after the block starts after the math, which has finished.
        """
        self._check_device(index)
        worker = self._stream("torch_stream", stream)
        return self._torch_streams.block(stream, worker.synchronize)

    # ---- optional ------------------------------------------------------------------------
    @property
    def kernels_note(self) -> str:
        return "Triton interpreter" if self.config.triton_kernels else ""

    def kernels(self) -> Mapping[str, Callable | KernelOffer]:
        """None by default (the torch references are the cpu backend's kernels); with
        ``ANYDEV_CPU_TRITON=1`` the shared Triton kernels, run by Triton's interpreter, one at a
        time: the interpreter keeps the launch's state in module globals."""
        if not self.config.triton_kernels:
            return {}
        from ..triton_kernels import kernels

        return {name: _serialised(fn) for name, fn in kernels().items()}

    def runtime_info(self) -> RuntimeInfo:
        return RuntimeInfo(
            runtime_version=f"anydev cpu {__version__}",
            driver_version="none (host memory)",
            collective_library="threads / gloo",
            collective_version=__version__,
            library_paths=[self._libc_name],
            notes=f"{self.config.num_devices} virtual devices of {self.config.device_memory} bytes each; collectives "
                  "between the threads of one process, gloo (torch.distributed) across processes",
        )

    def close(self) -> None:
        """Stops every stream (after its queued work) and raises the first error nobody has seen.

        Memory stays allocated, so that buffers and their tensor views never dangle; free them as usual.
        """
        self._closed = True
        workers = list(self._streams.values())
        self._streams.clear()
        self._events.clear()
        self._comms.clear()
        unreported = [error for error in (worker.stop() for worker in workers) if error is not None]
        if unreported:
            raise unreported[0]

    # ---- lookups and checks --------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("backend 'cpu'")

    def _check_device(self, index) -> None:
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or not 0 <= index < self.config.num_devices:
            raise InvalidArgumentError(
                f"cpu device index {index!r} is out of range: there are {self.config.num_devices} virtual devices "
                "(set ANYDEV_CPU_DEVICES for more)"
            )

    def _current_device(self) -> int:
        self._check_open()
        index = self.get_device()
        self._check_device(index)
        return index

    def _workers_on(self, device: int) -> list[StreamWorker]:
        return [worker for worker in list(self._streams.values()) if worker.device == device]

    def _stream(self, call: str, handle: int) -> StreamWorker:
        self._check_open()
        worker = self._streams.get(handle)
        if worker is None:
            raise call_error(call, INVALID_HANDLE, f"stream {handle!r} is unknown or destroyed")
        return worker

    def _event(self, call: str, handle: int) -> CpuEvent:
        self._check_open()
        event = self._events.get(handle)
        if event is None:
            raise call_error(call, INVALID_HANDLE, f"event {handle!r} is unknown or destroyed")
        return event

    def _comm(self, call: str, handle: int, aborted_ok: bool = False) -> _Communicator:
        self._check_open()
        communicator = self._comms.get(handle)
        if communicator is None:
            raise call_error(call, INVALID_HANDLE, f"communicator {handle!r} is unknown or destroyed")
        if handle in self._aborted and not aborted_ok:
            raise CollectiveAbortedError(f"cpu {call}: communicator {handle} was aborted; only comm_destroy may "
                                         "follow: destroy it and create new communicators")
        return communicator

    def _add_comm(self, communicator: _Communicator) -> int:
        handle = self._new_handle()
        self._comms[handle] = communicator
        return handle


def _check_nbytes(nbytes, what: str = "size") -> None:
    if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool) or nbytes < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative int, got {nbytes!r}")


class CpuGraphRuntime(CpuRuntime):
    """The cpu runtime with device graphs (``torch_graph``, contract 1.1): ``ANYDEV_CPU_GRAPHS=1``."""

    def torch_graph(self, stream: int, index: int):
        from .graphs import CpuGraph

        self._check_device(index)
        return CpuGraph(self, stream)


_INTERPRETER_LOCK = threading.Lock()


def _serialised(kernel: Callable | KernelOffer) -> Callable | KernelOffer:
    """``kernel`` called under one process-wide lock (Triton's interpreter is not thread-safe); an
    offer keeps its declaration, its kernel serialised."""
    if isinstance(kernel, KernelOffer):
        return dataclasses.replace(kernel, kernel=_serialised(kernel.kernel))

    def serialised(*args, **kwargs):
        with _INTERPRETER_LOCK:
            return kernel(*args, **kwargs)

    serialised.__name__ = serialised.__qualname__ = kernel.__name__
    serialised.__doc__ = kernel.__doc__
    return serialised
