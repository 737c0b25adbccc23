"""Allocations of the cpu runtime: aligned libc memory, per-device accounting and address checks."""
from __future__ import annotations

import bisect
import os
import threading

from ...plugin_api.errors import OutOfMemoryError
from .errors import INVALID_VALUE, MEMORY_ALLOCATION, call_error
from .libc import ffi, pointer

ALIGNMENT = 256
_MEMINFO = "/proc/meminfo"


def host_available_bytes() -> int:
    """Memory the host can still give without swapping: ``MemAvailable`` on Linux, free pages elsewhere."""
    if os.path.exists(_MEMINFO):
        with open(_MEMINFO) as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


#: The byte new device allocations are filled with.
UNINITIALISED = 0xA5


class MemoryTable:
    """Live device and pinned-host allocations. Thread-safe.

    Device memory is accounted per virtual device against ``capacity``; host memory only against what
    the host has available. Every allocation gets its own non-null address, 0-byte ones included.
    New device memory holds the byte :data:`UNINITIALISED` (a GPU's holds leftovers), so code that
    forgets to zero it reads garbage here too, instead of the zero pages a fresh mapping would give.
    """

    def __init__(self, lib, num_devices: int, capacity: int):
        self._lib = lib
        self.capacity = capacity
        self._lock = threading.Lock()
        self._device: dict[int, tuple[int, int]] = {}  # address -> (device, nbytes)
        self._host: dict[int, int] = {}  # address -> nbytes
        self._device_starts: list[int] = []  # sorted addresses of _device, for range checks
        self._used = [0] * num_devices

    def free_bytes(self, device: int) -> int:
        return max(0, min(self.capacity - self._used[device], host_available_bytes()))

    def alloc_device(self, device: int, nbytes: int) -> int:
        with self._lock:
            free = self.free_bytes(device)
            if nbytes > free:
                raise call_error(
                    "malloc", MEMORY_ALLOCATION,
                    f"cannot allocate {nbytes} bytes on cpu:{device}: {free} bytes free of {self.capacity} "
                    "(the capacity is set by ANYDEV_CPU_DEVICE_MEMORY; free is also capped by the host's available memory)",
                    OutOfMemoryError,
                )
            self._used[device] += nbytes   # reserved; the fill below runs outside the lock
        try:
            address = self._aligned_alloc("malloc", nbytes)
        except BaseException:
            with self._lock:
                self._used[device] -= nbytes
            raise
        self._lib.memset(pointer(address), UNINITIALISED, nbytes)
        with self._lock:
            self._device[address] = (device, nbytes)
            bisect.insort(self._device_starts, address)
            return address

    def device_of(self, call: str, address: int) -> int:
        """The device of the allocation starting at ``address``; RuntimeCallError if there is none."""
        entry = self._device.get(address)
        if entry is None:
            raise self._not_allocated(call, address, self._host, "free_host")
        return entry[0]

    def free_device(self, address: int) -> None:
        with self._lock:
            entry = self._device.pop(address, None)
            if entry is None:
                raise self._not_allocated("free", address, self._host, "free_host")
            self._device_starts.pop(bisect.bisect_left(self._device_starts, address))
            self._used[entry[0]] -= entry[1]
            self._lib.free(pointer(address))

    def alloc_host(self, nbytes: int) -> int:
        with self._lock:
            available = host_available_bytes()
            if nbytes > available:
                raise call_error(
                    "malloc_host", MEMORY_ALLOCATION,
                    f"cannot allocate {nbytes} bytes of host memory: the host has {available} bytes available",
                    OutOfMemoryError,
                )
            address = self._aligned_alloc("malloc_host", nbytes)
            self._host[address] = nbytes
            return address

    def free_host(self, address: int) -> None:
        with self._lock:
            if self._host.pop(address, None) is None:
                raise self._not_allocated("free_host", address, self._device, "free")
            self._lib.free(pointer(address))

    def host_bytes(self) -> int:
        """Bytes of pinned host memory currently allocated."""
        return sum(self._host.values())

    def check_device_range(self, call: str, address: int, nbytes: int) -> None:
        """Raise RuntimeCallError unless ``[address, address+nbytes)`` lies in one live device allocation."""
        if nbytes == 0:
            return
        with self._lock:
            index = bisect.bisect_right(self._device_starts, address) - 1
            start = self._device_starts[index] if index >= 0 else None
            if start is not None and address + nbytes <= start + self._device[start][1]:
                return
        raise call_error(
            call, INVALID_VALUE,
            f"[{address:#x}, {address + nbytes:#x}) is not inside a live device allocation (freed, out of bounds, or not from malloc)",
        )

    def _aligned_alloc(self, call: str, nbytes: int) -> int:
        slot = ffi.new("void **")
        code = self._lib.posix_memalign(slot, ALIGNMENT, max(nbytes, 1))
        if code != 0:
            raise call_error(call, MEMORY_ALLOCATION, f"posix_memalign({nbytes}) failed with errno {code}", OutOfMemoryError)
        return int(ffi.cast("uintptr_t", slot[0]))

    @staticmethod
    def _not_allocated(call: str, address: int, other_table: dict, other_call: str):
        if address in other_table:
            return call_error(call, INVALID_VALUE, f"{address:#x} was not allocated for {call}; release it with {other_call}")
        return call_error(call, INVALID_VALUE, f"{address:#x} is not a live allocation (already freed, or never allocated here)")
