"""Device work of a known length, sized from the device's own speed, and polling helpers.

"Long work" is a chain of memsets sized from the device's own memset speed (measured first) to take
about :data:`LONG_WORK_S` seconds, so that the checks hold on a CPU thread and on a 4 TB/s GPU alike:
enqueuing it takes a tiny fraction of that, so work enqueued behind it has certainly not run yet when
the host looks right after enqueuing. Checks use it to prove asynchrony by order (what the host sees
before and after the stream passes a point), not by wall-clock thresholds.
"""
from __future__ import annotations

import time

import numpy as np

LONG_WORK_S = 0.3
MAX_CHAIN = 2000  # memsets; bounds the enqueue time
SMALL_CHUNK = 64 << 20  # first try; a CPU thread sets it in a few ms
BIG_CHUNK = 1 << 30  # on fast devices, so that each memset outlasts its enqueue by far
POLL_TIMEOUT_S = 60.0  # a condition polled for longer than this is reported, not waited on forever


def read_back(stream, buf, nbytes=None, offset=0) -> np.ndarray:
    """The bytes of a device buffer (from ``offset``), copied to the host after the stream's work."""
    nbytes = buf.nbytes - offset if nbytes is None else nbytes
    out = np.empty(nbytes, dtype=np.uint8)
    stream.memcpy_async(out, buf, nbytes, src_offset=offset)
    stream.synchronize()
    return out


class LongWork:
    """A buffer and a chain of memsets on it that takes about ``LONG_WORK_S`` on this device."""

    def __init__(self, device, stream):
        free = device.memory_info().free
        self.buf, one = self._calibrate(device, stream, max(1 << 20, min(SMALL_CHUNK, free // 8)))
        if one < 1e-3 and free // 8 > self.buf.nbytes:  # a fast device: use a bigger buffer
            self.buf.free()
            self.buf, one = self._calibrate(device, stream, min(BIG_CHUNK, free // 8))
        self.nbytes = self.buf.nbytes
        self.chain = int(min(MAX_CHAIN, max(8, LONG_WORK_S / one)))

    @staticmethod
    def _calibrate(device, stream, nbytes):
        """A buffer of ``nbytes`` and the seconds one memset of it takes (after a first, warming one)."""
        buf = device.alloc(nbytes)
        stream.memset_async(buf, 0)
        stream.synchronize()
        start = time.perf_counter()
        stream.memset_async(buf, 1)
        stream.synchronize()
        return buf, max(time.perf_counter() - start, 1e-6)

    def enqueue(self, stream, final_value: int, repeats: int = 1) -> None:
        """The chain (``repeats`` times over), ending with every byte of the buffer equal to ``final_value``."""
        for i in range(self.chain * repeats - 1):
            stream.memset_async(self.buf, i % 251)
        stream.memset_async(self.buf, final_value)

    def free(self) -> None:
        self.buf.free()


def poll(condition, what: str, timeout: float = POLL_TIMEOUT_S) -> None:
    """Return once ``condition()`` is true; raise ``AssertionError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(0.0005)
