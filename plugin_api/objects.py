"""The objects users hold: Backend → Device → buffers, streams, events; communicators.

They wrap a :class:`~anydev.plugin_api.runtime.DeviceRuntime` once for every backend, so that argument
checks, ownership and ``close()`` behave the same on every card. Each object comes from a factory
(``backend.device(0).create_stream()``); ``close()`` is safe to call twice; any other use after close
raises :class:`ClosedError`. ``Buffer.free()`` is the explicit free: a second ``free()`` raises.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Sequence

import numpy as np

from .errors import ClosedError, InvalidArgumentError
from .runtime import DeviceRuntime, TorchGraph
from .types import DTYPE_SIZES, CopyKind, MemoryInfo, dtype_name


class Closable:
    """``close()`` once releases; later calls do nothing; ``_check_open`` guards every other use."""

    _closed = False
    _what = "object"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    def _release(self) -> None:  # pragma: no cover - overridden
        pass

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(self._what)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Backend(Closable):
    """A loaded backend: the entry point to its devices and collectives."""

    def __init__(self, runtime: DeviceRuntime):
        self.runtime = runtime
        self.name = runtime.name
        self._what = f"backend '{self.name}'"
        self._devices: dict[int, Device] = {}
        self._lock = threading.Lock()

    @property
    def torch_device_type(self) -> str:
        return self.runtime.torch_device_type

    def supports(self, call: str) -> bool:
        """True when the runtime provides ``call`` (required calls always; optional ones if overridden)."""
        return self.runtime.supports(call)

    def device_count(self) -> int:
        self._check_open()
        return self.runtime.device_count()

    def device(self, index: int = 0) -> "Device":
        """The device ``index`` (one object per index)."""
        self._check_open()
        count = self.runtime.device_count()
        if not isinstance(index, int) or not 0 <= index < count:
            raise InvalidArgumentError(
                f"{self.name}: device index {index!r} out of range; this machine has {count} device(s)"
            )
        with self._lock:
            if index not in self._devices:
                self._devices[index] = Device(self, index)
            return self._devices[index]

    def current_device(self) -> "Device":
        """The calling thread's current device."""
        self._check_open()
        return self.device(self.runtime.get_device())

    def create_communicators(self, devices: Sequence["Device"]) -> list["Communicator"]:
        """One communicator per device, rank i on ``devices[i]``, for thread-per-rank use."""
        self._check_open()
        devices = list(devices)
        if not devices:
            raise InvalidArgumentError("create_communicators needs at least one device")
        if len({d.index for d in devices}) != len(devices):
            raise InvalidArgumentError("create_communicators: each rank needs its own device")
        handles = self.runtime.comm_init_all([d.index for d in devices])
        return [Communicator(d, h, rank, len(devices)) for rank, (d, h) in enumerate(zip(devices, handles))]

    def comm_unique_id(self) -> bytes:
        """A unique id to share with every process of a multi-process group."""
        self._check_open()
        return self.runtime.comm_unique_id()

    def _release(self) -> None:
        self.runtime.close()

    def __repr__(self) -> str:
        return f"<anydev Backend {self.name}>"


class Device:
    """One device of a backend. Shared by threads; a rank's thread calls ``set_current()`` first."""

    def __init__(self, backend: Backend, index: int):
        self.backend = backend
        self.runtime = backend.runtime
        self.index = index

    def __repr__(self) -> str:
        return f"<anydev Device {self.backend.name}:{self.index}>"

    @property
    def torch_device(self):
        return self.runtime.torch_device(self.index)

    def set_current(self) -> None:
        """Make this device current for the calling thread."""
        self.backend._check_open()
        self.runtime.set_device(self.index)

    def synchronize(self) -> None:
        """Wait for all work on this device."""
        self.set_current()
        self.runtime.device_synchronize()

    def memory_info(self) -> MemoryInfo:
        self.set_current()
        return self.runtime.memory_info()

    def alloc(self, nbytes: int) -> "DeviceBuffer":
        """Allocate ``nbytes`` of device memory (0 allowed), aligned to 256 bytes."""
        _check_size(nbytes)
        self.set_current()
        return DeviceBuffer(self, self.runtime.malloc(nbytes), nbytes)

    def alloc_host(self, nbytes: int) -> "HostBuffer":
        """Allocate ``nbytes`` of pinned host memory for fast async copies to and from this device."""
        _check_size(nbytes)
        self.set_current()
        return HostBuffer(self, self.runtime.malloc_host(nbytes), nbytes)

    def create_stream(self) -> "Stream":
        self.set_current()
        return Stream(self, self.runtime.stream_create())

    def create_event(self, timing: bool = False) -> "Event":
        self.set_current()
        return Event(self, self.runtime.event_create(bool(timing)), bool(timing))


def _check_size(nbytes) -> None:
    if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool) or nbytes < 0:
        raise InvalidArgumentError(f"size must be a non-negative int of bytes, got {nbytes!r}")


class _Memory(Closable):
    """A span of memory owned by anydev. ``free()`` releases it; a second ``free()`` raises."""

    is_host = False

    def __init__(self, device: Device, ptr: int, nbytes: int):
        self.device = device
        self.ptr = ptr
        self.nbytes = nbytes
        self._closed = False  # on the instance: the hot paths read it, and that lookup is cheaper

    def free(self) -> None:
        """Release the memory now. Raises :class:`ClosedError` when it was already freed."""
        self._check_open()
        self.close()

    def address(self, offset: int = 0, nbytes: int = 0) -> int:
        """The address ``offset`` bytes in, after checking ``[offset, offset+nbytes)`` is inside."""
        self._check_open()
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise InvalidArgumentError(
                f"range [{offset}, {offset + nbytes}) is outside this {self.nbytes}-byte buffer"
            )
        return self.ptr + offset

    def as_tensor(self, dtype=None, shape=None, offset: int = 0):
        """View the memory as a torch tensor without copying (torch dtype, default uint8).

        ``shape`` defaults to 1-D over the rest of the buffer. The view is invalid after ``free()``.
        """
        import torch

        dtype = dtype or torch.uint8
        itemsize = torch.empty((), dtype=dtype).element_size()
        if shape is None:
            if (self.nbytes - offset) % itemsize:
                raise InvalidArgumentError(f"{self.nbytes - offset} bytes is not a whole number of {dtype}")
            shape = ((self.nbytes - offset) // itemsize,)
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        ptr = self.address(offset, nbytes)
        if offset % itemsize:
            raise InvalidArgumentError(f"offset {offset} is not aligned to {dtype}")
        raw = self._raw_tensor(ptr, nbytes)
        return raw.view(dtype).view(shape)

    def _raw_tensor(self, ptr: int, nbytes: int):
        return self.device.runtime.tensor_from_pointer(ptr, nbytes, self.device.index, self)


class DeviceBuffer(_Memory):
    """Device memory from ``Device.alloc``."""

    def __init__(self, device, ptr, nbytes):
        super().__init__(device, ptr, nbytes)
        self._what = f"device buffer of {nbytes} bytes on {device}"

    def _release(self) -> None:
        self.device.runtime.free(self.ptr)


class HostBuffer(_Memory):
    """Pinned host memory from ``Device.alloc_host``; also viewable as a numpy array."""

    is_host = True

    def __init__(self, device, ptr, nbytes):
        super().__init__(device, ptr, nbytes)
        self._what = f"pinned host buffer of {nbytes} bytes"

    def numpy(self, dtype=np.uint8) -> np.ndarray:
        """A numpy view of the whole buffer (no copy)."""
        self._check_open()
        return _numpy_view(self.ptr, self.nbytes, dtype, self)

    def _raw_tensor(self, ptr, nbytes):
        import torch

        return torch.from_numpy(_numpy_view(ptr, nbytes, np.uint8, self))

    def _release(self) -> None:
        self.device.runtime.free_host(self.ptr)


class _Owner:
    """Keeps a buffer alive from a numpy view's ``base``."""

    def __init__(self, ptr, nbytes, owner):
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}
        self.owner = owner


def _numpy_view(ptr, nbytes, dtype, owner) -> np.ndarray:
    return np.asarray(_Owner(ptr, nbytes, owner)).view(dtype)


def host_span(obj, writable: bool) -> tuple[int, int]:
    """Address and size of host memory given as a HostBuffer, a C-contiguous numpy array, a CPU torch
    tensor, or a bytes-like object (bytes are read-only)."""
    if isinstance(obj, HostBuffer):
        return obj.address(), obj.nbytes
    if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):  # torch.Tensor
        if obj.device.type != "cpu" or not obj.is_contiguous():
            raise InvalidArgumentError("a host tensor must be a contiguous CPU tensor")
        return obj.data_ptr(), obj.numel() * obj.element_size()
    array = obj if isinstance(obj, np.ndarray) else np.frombuffer(obj, dtype=np.uint8)
    if not array.flags.c_contiguous:
        raise InvalidArgumentError("host memory must be C-contiguous")
    if writable and not array.flags.writeable:
        raise InvalidArgumentError("the copy destination is read-only host memory")
    return array.ctypes.data, array.nbytes


class Stream(Closable):
    """An in-order queue of work on one device. Use one stream from one thread at a time."""

    def __init__(self, device: Device, handle: int):
        self.device = device
        self.runtime = device.runtime
        self.handle = handle
        self._what = f"stream on {device}"
        self._keepalive: list = []
        self._memset = self.runtime.memset_async
        self._closed = False  # on the instance: the hot paths read it, and that lookup is cheaper

    def memset_async(self, dst: DeviceBuffer, value: int, nbytes: int | None = None, offset: int = 0) -> None:
        """Enqueue: set ``nbytes`` (default: the rest of ``dst``) bytes from ``offset`` to byte ``value``."""
        # A hot path (benchmarked against the bare runtime call): one combined test, details on failure.
        if self._closed or dst.__class__ is not DeviceBuffer or dst._closed or dst.device is not self.device:
            self._memset_error(dst, value, nbytes, offset)
        if nbytes is None:
            nbytes = dst.nbytes - offset
        if not 0 <= value <= 255 or offset < 0 or nbytes < 0 or offset + nbytes > dst.nbytes:
            self._memset_error(dst, value, nbytes, offset)
        self._memset(dst.ptr + offset, value, nbytes, self.handle)

    def _memset_error(self, dst, value, nbytes, offset):
        """Raise the typed error that explains why ``memset_async`` refused its arguments."""
        self._check_open()
        if not isinstance(dst, DeviceBuffer):
            raise InvalidArgumentError(f"memset_async needs a DeviceBuffer, got {type(dst).__name__}")
        if dst.device is not self.device:
            raise InvalidArgumentError(f"buffer on {dst.device} used with a stream on {self.device}")
        if not 0 <= value <= 255:
            raise InvalidArgumentError(f"memset value must be a byte (0..255), got {value}")
        dst.address(offset, dst.nbytes - offset if nbytes is None else nbytes)  # raises ClosedError or range error

    def memcpy_async(self, dst, src, nbytes: int | None = None, dst_offset: int = 0, src_offset: int = 0) -> None:
        """Enqueue a copy; the direction follows from the arguments.

        ``dst``/``src`` are DeviceBuffers or host memory (HostBuffer, numpy array, CPU tensor,
        bytes-like). Pageable host memory is kept alive by the stream until its next ``synchronize()``
        but must not be changed before the copy has run.
        """
        self._check_open()
        dst_dev, src_dev = isinstance(dst, DeviceBuffer), isinstance(src, DeviceBuffer)
        if dst_dev:
            dst_ptr, dst_size = dst.address(), dst.nbytes
        else:
            dst_ptr, dst_size = host_span(dst, writable=True)
        if src_dev:
            src_ptr, src_size = src.address(), src.nbytes
        else:
            src_ptr, src_size = host_span(src, writable=False)
        if nbytes is None:
            nbytes = min(dst_size - dst_offset, src_size - src_offset)
        if dst_offset < 0 or src_offset < 0 or nbytes < 0 or dst_offset + nbytes > dst_size or src_offset + nbytes > src_size:
            raise InvalidArgumentError(
                f"copy of {nbytes} bytes (dst offset {dst_offset}, src offset {src_offset}) does not fit "
                f"a {dst_size}-byte destination and a {src_size}-byte source"
            )
        kind = {(False, False): CopyKind.HOST_TO_HOST, (False, True): CopyKind.HOST_TO_DEVICE,
                (True, False): CopyKind.DEVICE_TO_HOST, (True, True): CopyKind.DEVICE_TO_DEVICE}[(src_dev, dst_dev)]
        for obj in (dst, src):
            if not isinstance(obj, (DeviceBuffer, HostBuffer)):
                self._keepalive.append(obj)
        self.runtime.memcpy_async(dst_ptr + dst_offset, src_ptr + src_offset, nbytes, kind, self.handle)

    def record(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new untimed one if None) at the stream's tail and return it."""
        self._check_open()
        event = event or self.device.create_event()
        event.record(self)
        return event

    def wait(self, event: "Event") -> None:
        """Make later work on this stream wait for ``event``."""
        self._check_open()
        event._check_open()
        self.runtime.stream_wait_event(self.handle, event.handle)

    def synchronize(self) -> None:
        """Block until all work enqueued so far has finished."""
        self._check_open()
        self.runtime.stream_synchronize(self.handle)
        self._keepalive.clear()

    def torch_stream(self):
        """Context manager: torch kernels inside it run on this stream."""
        self._check_open()
        return self.runtime.torch_stream(self.handle, self.device.index)

    def create_graph(self) -> "Graph":
        """A device graph recording torch work on this stream (optional call ``torch_graph``,
        contract 1.1; ``backend.supports("torch_graph")`` tells). Raises ``NotSupportedError`` where
        the backend has no device graphs."""
        self._check_open()
        return Graph(self, self.runtime.torch_graph(self.handle, self.device.index))

    def _release(self) -> None:
        self.runtime.stream_destroy(self.handle)
        self._keepalive.clear()


class Graph(Closable):
    """Torch work on one stream, captured once, replayed many times (see
    :class:`~anydev.plugin_api.runtime.TorchGraph` for the rules). From ``stream.create_graph()``::

        with graph.capture():
            out = model(static_input)      # recorded, not run
        static_input.copy_(new_input)
        graph.replay()                     # runs it; ``out`` holds the result
    """

    def __init__(self, stream: Stream, graph: TorchGraph):
        self.stream = stream
        self.device = stream.device
        self._graph = graph
        self._captured = False
        self._capture_started = False
        self._what = f"device graph on {stream._what}"

    @property
    def captured(self) -> bool:
        return self._captured

    @contextlib.contextmanager
    def capture(self, share_memory_with: "Graph | None" = None):
        """Record the torch work this thread enqueues on the stream inside the ``with`` block.
        ``share_memory_with``: a captured graph of the same device whose memory pool to reuse (the
        two must never replay at the same time)."""
        self._check_open()
        self.stream._check_open()
        if self._capture_started:
            raise InvalidArgumentError(f"{self._what} was already captured; create a new graph to record again")
        shared = None
        if share_memory_with is not None:
            share_memory_with._check_open()
            if share_memory_with.device is not self.device or not share_memory_with.captured:
                raise InvalidArgumentError("share_memory_with must be a captured graph of the same device")
            shared = share_memory_with._graph
        self._capture_started = True
        with self._graph.capture(shared):
            yield self
        self._captured = True

    def replay(self) -> None:
        """Enqueue the recorded work on the stream."""
        self._check_open()
        self.stream._check_open()
        if not self._captured:
            raise InvalidArgumentError(f"{self._what} has no capture to replay; capture() it first")
        self._graph.replay()

    def _release(self) -> None:
        self._graph.close()


class Event(Closable):
    """A marker in a stream: query it, wait on it, time between two."""

    def __init__(self, device: Device, handle: int, timing: bool):
        self.device = device
        self.runtime = device.runtime
        self.handle = handle
        self.timing = timing
        self._what = f"event on {device}"
        self._record = self.runtime.event_record
        self._closed = False  # on the instance: the hot paths read it, and that lookup is cheaper

    def record(self, stream: Stream) -> None:
        """Record this event at ``stream``'s tail (a hot path: kept to one test and one call)."""
        if self._closed or stream._closed:
            raise ClosedError(self._what if self._closed else stream._what)
        self._record(self.handle, stream.handle)

    def query(self) -> bool:
        """True once the recorded work has finished; never blocks."""
        self._check_open()
        return self.runtime.event_query(self.handle)

    def synchronize(self) -> None:
        self._check_open()
        self.runtime.event_synchronize(self.handle)

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end``; both timing-enabled and completed."""
        self._check_open()
        end._check_open()
        if not (self.timing and end.timing):
            raise InvalidArgumentError("elapsed_ms needs two events created with timing=True")
        return self.runtime.event_elapsed_ms(self.handle, end.handle)

    def _release(self) -> None:
        self.runtime.event_destroy(self.handle)


class Communicator(Closable):
    """One rank of a collective group, bound to one device.

    Collectives take device memory as a DeviceBuffer (then ``count`` and ``dtype`` are required) or a
    contiguous torch tensor on this device (count and dtype come from it). ``recv`` defaults to
    ``send`` (in place where the op allows). They are enqueued on ``stream``.
    """

    def __init__(self, device: Device, handle: int, rank: int, nranks: int):
        self.device = device
        self.runtime = device.runtime
        self.handle = handle
        self.rank = rank
        self.nranks = nranks
        self._what = f"communicator rank {rank}/{nranks} on {device}"

    @classmethod
    def from_unique_id(cls, device: Device, unique_id: bytes, nranks: int, rank: int) -> "Communicator":
        """Join a multi-process group (every process passes the same ``unique_id``)."""
        if not 0 <= rank < nranks:
            raise InvalidArgumentError(f"rank {rank} is outside 0..{nranks - 1}")
        device.set_current()
        return cls(device, device.runtime.comm_init_rank(unique_id, nranks, rank), rank, nranks)

    def all_reduce(self, send, recv=None, *, op: str = "sum", stream: Stream, count=None, dtype=None) -> None:
        if op not in self.runtime.reduce_ops:
            raise InvalidArgumentError(f"{self.runtime.name}: reduce op {op!r} not supported; use one of {self.runtime.reduce_ops}")
        send_ptr, n, dt = self._span(send, count, dtype)
        recv_ptr, _, _ = self._span(send if recv is None else recv, n, dt)
        self.runtime.all_reduce(send_ptr, recv_ptr, n, dt, op, self.handle, self._stream(stream, send, recv))

    def all_gather(self, send, recv, *, stream: Stream, count=None, dtype=None) -> None:
        """``count`` is the element count each rank sends; ``recv`` holds ``nranks * count``."""
        send_ptr, n, dt = self._span(send, count, dtype)
        recv_ptr, _, _ = self._span(recv, n * self.nranks, dt)
        self.runtime.all_gather(send_ptr, recv_ptr, n, dt, self.handle, self._stream(stream, send, recv))

    def broadcast(self, send, recv=None, *, root: int = 0, stream: Stream, count=None, dtype=None) -> None:
        if not 0 <= root < self.nranks:
            raise InvalidArgumentError(f"broadcast root {root} is outside 0..{self.nranks - 1}")
        send_ptr, n, dt = self._span(send, count, dtype)
        recv_ptr, _, _ = self._span(send if recv is None else recv, n, dt)
        self.runtime.broadcast(send_ptr, recv_ptr, n, dt, root, self.handle, self._stream(stream, send, recv))

    def _stream(self, stream: Stream, *memory) -> int:
        """``stream``'s handle, after checks; torch tensors in ``memory`` stay alive until its next
        ``synchronize()``, as pageable copies do, so a temporary cannot be freed under the collective."""
        self._check_open()
        stream._check_open()
        if stream.device is not self.device:
            raise InvalidArgumentError(f"{self._what} used with a stream on {stream.device}")
        stream._keepalive.extend(m for m in memory if m is not None and not isinstance(m, DeviceBuffer))
        return stream.handle

    def _span(self, memory, count, dtype) -> tuple[int, int, str]:
        """(address, element count, dtype name) of ``memory``, checked against this device."""
        if isinstance(memory, DeviceBuffer):
            if memory.device is not self.device:
                raise InvalidArgumentError(f"buffer on {memory.device} used with {self._what}")
            if count is None or dtype is None:
                raise InvalidArgumentError("collectives on a DeviceBuffer need count= and dtype=")
            dt = self._dtype(dtype)
            return memory.address(0, count * DTYPE_SIZES[dt]), count, dt
        if hasattr(memory, "data_ptr"):
            dt = self._dtype(memory.dtype if dtype is None else dtype)
            if memory.device != self.device.torch_device or not memory.is_contiguous():
                raise InvalidArgumentError(
                    f"collective tensor must be contiguous on {self.device.torch_device}, got {memory.device}"
                )
            n = memory.numel() if count is None else count
            if n * DTYPE_SIZES[dt] > memory.numel() * memory.element_size():
                raise InvalidArgumentError(f"count {n} exceeds the tensor's {memory.numel()} elements")
            return memory.data_ptr(), n, dt
        raise InvalidArgumentError(f"collectives take a DeviceBuffer or a torch tensor, got {type(memory).__name__}")

    def _dtype(self, dtype) -> str:
        dt = dtype_name(dtype)
        if dt not in self.runtime.collective_dtypes:
            raise InvalidArgumentError(
                f"{self.runtime.name}: collectives do not support {dt}; supported: {', '.join(self.runtime.collective_dtypes)}"
            )
        return dt

    def _release(self) -> None:
        self.runtime.comm_destroy(self.handle)
