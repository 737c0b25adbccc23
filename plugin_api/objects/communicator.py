"""Communicator: one rank of a collective group, bound to one device."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError
from ..types import DTYPE_SIZES, dtype_name
from .closable import Closable
from .memory import DeviceBuffer

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream


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
        """``stream``'s handle, after checks; the stream holds torch tensors in ``memory`` until the
        collective has run (as it does pageable copies), so a temporary cannot be freed under it."""
        self._check_open()
        stream._check_open()
        if stream.device is not self.device:
            raise InvalidArgumentError(f"{self._what} used with a stream on {stream.device}")
        stream._hold([m for m in memory if m is not None and not isinstance(m, DeviceBuffer)])
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
