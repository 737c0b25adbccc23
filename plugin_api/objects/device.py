"""Backend and Device: the entry points, and the factories of every other object."""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import InvalidArgumentError
from ..runtime import DeviceRuntime
from ..types import MemoryInfo
from .closable import Closable
from .communicator import Communicator
from .event import Event
from .memory import DeviceBuffer, HostBuffer
from .stream import Stream

if TYPE_CHECKING:
    from ..kernels import KernelSet


class Backend(Closable):
    """A loaded backend: the entry point to its devices and collectives."""

    def __init__(self, runtime: DeviceRuntime):
        self.runtime = runtime
        self.name = runtime.name
        self._what = f"backend '{self.name}'"
        self._devices: dict[int, Device] = {}
        self._lock = threading.Lock()
        self._kernels = None

    @property
    def torch_device_type(self) -> str:
        return self.runtime.torch_device_type

    def supports(self, call: str) -> bool:
        """True when the runtime provides ``call`` (required calls always; optional ones if overridden)."""
        return self.runtime.supports(call)

    def kernels(self) -> "KernelSet":
        """The device kernels to run on this backend (contract 1.2): the runtime's own where it
        offers them (:meth:`DeviceRuntime.kernels`), the torch references otherwise; asked once."""
        from ..kernels import KernelSet   # imports torch, which the rest of the contract does not

        self._check_open()
        with self._lock:
            if self._kernels is None:
                native = self.runtime.kernels() if self.supports("kernels") else {}
                self._kernels = KernelSet(self.name, native, getattr(self.runtime, "kernels_note", ""))
            return self._kernels

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
    """One device of a backend. Shared by threads; a rank's thread calls ``set_current()`` first.
    Only ``set_current()`` changes the calling thread's current device."""

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

    @contextlib.contextmanager
    def _made_current(self):
        """This device is current for the calling thread inside the block; the thread's previous
        current device is restored after it (the factories below have no side effect)."""
        self.backend._check_open()
        previous = self.runtime.get_device()
        if previous == self.index:
            yield
            return
        self.runtime.set_device(self.index)
        try:
            yield
        finally:
            self.runtime.set_device(previous)

    def synchronize(self) -> None:
        """Wait for all work on this device."""
        with self._made_current():
            self.runtime.device_synchronize()

    def memory_info(self) -> MemoryInfo:
        with self._made_current():
            return self.runtime.memory_info()

    def alloc(self, nbytes: int) -> "DeviceBuffer":
        """Allocate ``nbytes`` of device memory (0 allowed), aligned to 256 bytes."""
        _check_size(nbytes)
        with self._made_current():
            return DeviceBuffer(self, self.runtime.malloc(nbytes), nbytes)

    def alloc_host(self, nbytes: int) -> "HostBuffer":
        """Allocate ``nbytes`` of pinned host memory for fast async copies to and from this device."""
        _check_size(nbytes)
        with self._made_current():
            return HostBuffer(self, self.runtime.malloc_host(nbytes), nbytes)

    def create_stream(self) -> "Stream":
        with self._made_current():
            return Stream(self, self.runtime.stream_create())

    def create_event(self, timing: bool = False) -> "Event":
        with self._made_current():
            return Event(self, self.runtime.event_create(bool(timing)), bool(timing))


def _check_size(nbytes) -> None:
    if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool) or nbytes < 0:
        raise InvalidArgumentError(f"size must be a non-negative int of bytes, got {nbytes!r}")
