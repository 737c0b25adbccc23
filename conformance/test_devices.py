"""Devices: the current device is per thread, and allocations, streams and memory queries act on the
calling thread's current device (the contract's rule, as in CUDA)."""
from __future__ import annotations

import threading

import numpy as np

from anydev.conformance.long_work import read_back
from anydev.conformance.support import require_devices, run_ranks

MiB = 1 << 20


def test_current_device_is_per_thread(backend):
    """Threads that each make another device current, all at once, each still see their own."""
    n = min(backend.device_count(), 4)
    require_devices(backend, 2)
    runtime = backend.runtime
    everyone_set = threading.Barrier(n, timeout=60)

    def body(index: int) -> int:
        runtime.set_device(index)
        everyone_set.wait()  # every thread has now set its device
        seen = runtime.get_device()
        everyone_set.wait()
        return seen

    seen = run_ranks(n, body, "threads setting their current device")
    assert seen == list(range(n)), (
        f"threads that set devices {list(range(n))} then read {seen}: the current device is not per thread"
    )


def test_alloc_lands_on_the_current_device(backend):
    """Memory allocated with device 1 current is taken from device 1 (its free memory drops, device
    0's does not) and works with device 1's streams. Other processes on the same GPUs may allocate at
    the same time, so up to three tries; a backend that allocates on the wrong device never passes."""
    require_devices(backend, 2)
    first, second = backend.device(0), backend.device(1)
    nbytes = max(MiB, min(256 * MiB, second.memory_info().free // 8)) & ~(MiB - 1)
    observed = []
    for _ in range(3):
        free0, free1 = first.memory_info().free, second.memory_info().free
        buf = second.alloc(nbytes)
        try:
            drop0, drop1 = free0 - first.memory_info().free, free1 - second.memory_info().free
            stream = second.create_stream()
            try:
                stream.memset_async(buf, 0x42, MiB)
                assert bool(np.all(read_back(stream, buf, MiB) == 0x42)), "memory allocated on device 1 does not work on its stream"
            finally:
                stream.close()
        finally:
            buf.free()
        observed.append((drop0, drop1))
        if drop1 >= nbytes // 2 and drop0 < nbytes // 2:
            break
    else:
        raise AssertionError(
            f"allocating {nbytes / MiB:.0f} MiB with device 1 current changed free memory by (device 0, device 1) = "
            + ", ".join(f"({a / MiB:.1f}, {b / MiB:.1f}) MiB" for a, b in observed)
            + ": the allocation did not come from the current device"
        )
    backend.device(0).set_current()
