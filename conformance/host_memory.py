"""Measuring host memory around a block of code: the process's resident-set peak (Linux ``VmHWM``,
reset through ``/proc/self/clear_refs``) and the peak of Python/numpy allocations (``tracemalloc``).

The RSS peak sees every host allocation that is touched (torch tensors included); tracemalloc also
sees numpy buffers that are allocated but never touched (``np.zeros`` maps the zero page, which RSS
does not count). Neither is exact to the byte; both are far more precise than the sizes checked here.
"""
from __future__ import annotations

import re
import tracemalloc
from dataclasses import dataclass

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"


class NotMeasurable(Exception):
    """This platform cannot reset or read the resident-set peak (the message says why)."""


def status_bytes(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    try:
        with open(STATUS) as f:
            text = f.read()
    except OSError as exc:
        raise NotMeasurable(f"cannot read {STATUS} ({exc}); the host-memory peak is measured on Linux only") from None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    if match is None:
        raise NotMeasurable(f"{STATUS} has no {field} field")
    return int(match.group(1)) * 1024


def reset_rss_peak() -> None:
    """Set the resident-set peak (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
    except OSError as exc:
        raise NotMeasurable(f"cannot reset the RSS peak through {CLEAR_REFS} ({exc})") from None
    if status_bytes("VmHWM") > status_bytes("VmRSS") + (4 << 20):
        raise NotMeasurable(f"writing 5 to {CLEAR_REFS} did not reset VmHWM (kernel older than 4.0?)")


@dataclass
class HostPeak:
    """Peaks above the starting point, in bytes, filled in when the ``with`` block ends."""

    rss: int = 0  # resident-set peak minus the RSS at the start
    python: int = 0  # tracemalloc peak (Python objects and numpy buffers)

    def __enter__(self) -> "HostPeak":
        self._was_tracing = tracemalloc.is_tracing()
        if not self._was_tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        self._python_start = tracemalloc.get_traced_memory()[0]
        reset_rss_peak()
        self._rss_start = status_bytes("VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        self.rss = status_bytes("VmHWM") - self._rss_start
        self.python = tracemalloc.get_traced_memory()[1] - self._python_start
        if not self._was_tracing:
            tracemalloc.stop()


def device_memory_is_host_memory(device, probe_bytes: int = 96 << 20) -> bool:
    """True when the device's memory is resident host memory (the cpu backend, emulated runtimes):
    writing a fresh device buffer then grows this process's RSS by about its size.

    The probe is larger than glibc's largest dynamic mmap threshold (32 MiB), so that it is a fresh
    mapping even after earlier checks freed large buffers (a heap chunk reused from them would
    already be resident, and the RSS would not grow)."""
    before = status_bytes("VmRSS")
    buf = device.alloc(probe_bytes)
    try:
        stream = device.create_stream()
        stream.memset_async(buf, 0x5A)
        stream.synchronize()
        stream.close()
        grown = status_bytes("VmRSS") - before
    finally:
        buf.free()
    return grown >= probe_bytes // 2
