"""Mutants of memory: memsets, copies, pinned memory, free, allocation placement, torch views."""
from __future__ import annotations

import bisect
import ctypes
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
