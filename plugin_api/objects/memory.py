"""Device buffers and pinned host buffers, their torch views, and host memory given as arrays."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidArgumentError
from .closable import Closable

if TYPE_CHECKING:
    from .device import Device


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
        return host_array(self.ptr, self.nbytes, self, dtype)

    def _raw_tensor(self, ptr, nbytes):
        import torch

        return torch.from_numpy(host_array(ptr, nbytes, self))

    def _release(self) -> None:
        self.device.runtime.free_host(self.ptr)


class _Owner:
    """Keeps a buffer alive from a numpy view's ``base``."""

    def __init__(self, ptr, nbytes, owner):
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}
        self.owner = owner


def host_array(ptr: int, nbytes: int, owner: object, dtype=np.uint8) -> np.ndarray:
    """A numpy view (no copy) of ``nbytes`` of host memory at ``ptr`` that keeps ``owner`` alive as long
    as the view (or a torch tensor made from it with ``torch.from_numpy``) exists."""
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
