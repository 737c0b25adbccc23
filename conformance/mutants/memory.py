"""Mutants of memory: memsets, copies, pinned memory, free, allocation placement, torch views."""
from __future__ import annotations

import bisect
import ctypes
import mmap
import threading

import numpy as np
import torch

from anydev.backends.cpu.runtime import CpuRuntime
from anydev.plugin_api.objects.memory import host_array
from anydev.plugin_api.types import CopyKind

from . import mutant


@mutant("memset-noop", checks=["test_memory.py"])
class MemsetDoesNothing(CpuRuntime):
    """memset_async checks its arguments and then does nothing."""

    def memset_async(self, ptr, value, nbytes, stream):
        super().memset_async(ptr, value, 0, stream)


@mutant("memset-first-page", checks=["test_memory.py"])
class MemsetFirstPageOnly(CpuRuntime):
    """memset_async writes only the first 4 KiB page of the range."""

    def memset_async(self, ptr, value, nbytes, stream):
        super().memset_async(ptr, value, min(nbytes, 4096), stream)


@mutant("memcpy-synchronous", checks=["test_streams_events.py"])
class MemcpySynchronous(CpuRuntime):
    """memcpy_async waits for the stream and the copy before it returns (a synchronous copy)."""

    def memcpy_async(self, dst, src, nbytes, kind, stream):
        super().memcpy_async(dst, src, nbytes, kind, stream)
        self._stream("memcpy_async", stream).synchronize()


@mutant("pinned-is-pageable", checks=["test_streams_events.py"])
class PinnedIsPageable(CpuRuntime):
    """malloc_host returns pageable memory, so host-to-device copies from it are staged when they are
    enqueued (as CUDA does for pageable memory) instead of reading the host bytes when the stream
    reaches them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._staged: dict[int, list] = {}

    def memcpy_async(self, dst, src, nbytes, kind, stream):
        if CopyKind(kind) == CopyKind.HOST_TO_DEVICE and nbytes:
            staged = np.empty(nbytes, dtype=np.uint8)
            ctypes.memmove(staged.ctypes.data, src, nbytes)
            self._staged.setdefault(stream, []).append(staged)  # kept until the stream is synchronised
            src = staged.ctypes.data
        super().memcpy_async(dst, src, nbytes, kind, stream)

    def stream_synchronize(self, stream):
        super().stream_synchronize(stream)
        self._staged.pop(stream, None)


@mutant("free-no-wait", checks=["test_memory.py"])
class FreeDoesNotWait(CpuRuntime):
    """free returns at once; the memory is released later, after the device's queued work (the fault:
    free is not synchronising, so a copy queued before it has not landed when it returns)."""

    def free(self, ptr):
        if ptr == 0:
            return
        workers = self._workers_on(self._memory.device_of("free", ptr))

        def release_later():
            for worker in workers:
                worker.wait_idle()
            self._memory.free_device(ptr)

        threading.Thread(target=release_later, daemon=True).start()


@mutant("free-host-no-wait", checks=["test_memory_domains.py"])
class FreeHostDoesNotWait(CpuRuntime):
    """free_host returns at once; the pinned memory is released later, after the streams' queued
    work (the fault: a copy queued into the buffer has not landed when free_host returns)."""

    def free_host(self, ptr):
        if ptr == 0:
            return
        workers = list(self._streams.values())

        def release_later():
            for worker in workers:
                worker.wait_idle()
            self._memory.free_host(ptr)

        threading.Thread(target=release_later, daemon=True).start()


@mutant("alloc-on-device-0", checks=["test_devices.py"])
class AllocIgnoresCurrentDevice(CpuRuntime):
    """malloc ignores the current device and places every allocation on device 0."""

    def malloc(self, nbytes):
        self._current_device()
        return self._memory.alloc_device(0, int(nbytes))


@mutant("torch-view-offset", checks=["test_memory.py"])
class TorchViewAtWrongOffset(CpuRuntime):
    """tensor_from_pointer views the start of the allocation, ignoring the offset into it."""

    def tensor_from_pointer(self, ptr, nbytes, index, owner):
        tensor = super().tensor_from_pointer(ptr, nbytes, index, owner)
        starts = self._memory._device_starts
        start = starts[bisect.bisect_right(starts, ptr) - 1]
        return torch.from_numpy(host_array(start, nbytes, owner)) if start != ptr else tensor


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _copy_from_released_stage(dst: int, stage: int, nbytes: int) -> None:
    ctypes.memmove(dst, stage, nbytes)


@mutant("d2h-copy-unordered", checks=["test_memory.py"])
class DeviceToHostCopyUnordered(CpuRuntime):
    """memcpy_async device-to-host lands outside stream order: the stream copies into a staging
    buffer of the backend's own, stream_synchronize releases that buffer as if the copy were done, and
    a side thread copies from it afterwards, reading freed host memory. The process segfaults (the
    released pages are made inaccessible, as an unmap does, with their addresses kept reserved so
    that nothing else maps there and the crash is certain)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._late: dict[int, list[tuple[int, int, int]]] = {}

    def memcpy_async(self, dst, src, nbytes, kind, stream):
        if CopyKind(kind) != CopyKind.DEVICE_TO_HOST or not nbytes:
            return super().memcpy_async(dst, src, nbytes, kind, stream)
        stage = _libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        super().memcpy_async(stage, src, nbytes, kind, stream)
        self._late.setdefault(stream, []).append((dst, stage, nbytes))

    def stream_synchronize(self, stream):
        super().stream_synchronize(stream)
        for dst, stage, nbytes in self._late.pop(stream, []):
            _libc.mprotect(stage, nbytes, 0)  # PROT_NONE  # released: the copy is believed done
            late = threading.Thread(target=_copy_from_released_stage, args=(dst, stage, nbytes), name="late-d2h-copy")
            late.start()
            late.join()
