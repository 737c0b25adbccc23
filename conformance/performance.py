"""The performance row of the conformance report: bandwidths measured with the backend's own timing
events, beside the device's peak where the backend reports one. Never a pass/fail criterion.

* ``memset``: bytes set per second.
* ``device copy``: bytes read plus bytes written per second of a device-to-device copy (so it compares
  with the memory's peak, as nccl-tests and bandwidthTest count it).
* ``all_reduce``: bus bandwidth as nccl-tests define it, ``algbw x 2(n-1)/n`` with ``algbw = bytes /
  time`` of a float32 sum over all ranks (the slowest rank's time); at 1 rank nothing crosses a bus,
  so the row gives the algorithm bandwidth and says so.
* ``linear``: the decode GEMV (one row, bfloat16, the backend's native kernel or the torch
  reference, as labelled): weight, input and output bytes per second.

The peak is ``runtime.memory_bandwidth_peak(index)`` (bytes/s) where the runtime has that method (the
CUDA-like runtimes compute it from the memory clock and bus width; it is not a contract call).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

MiB = 1 << 20
METRICS = ("memset", "device copy", "all_reduce", "linear")
HEADERS = {"all_reduce": "all_reduce (bus bandwidth)"}


def bus_bandwidth(algbw: float, nranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: ``algbw x 2(n-1)/n`` (1 rank: ``algbw``, nothing
    crosses a bus)."""
    return algbw if nranks == 1 else algbw * 2 * (nranks - 1) / nranks


@dataclass
class Measurement:
    metric: str
    bytes: int = 0                 # bytes per call (per rank for all_reduce)
    seconds: float = 0.0           # per call
    gbps: float | None = None      # the row's bandwidth (bus bandwidth for all_reduce), GB/s (1e9)
    peak_gbps: float | None = None
    ranks: int = 1
    note: str = ""
    error: str = ""                # why it could not be measured

    def as_dict(self) -> dict:
        out = asdict(self)
        out["of_peak"] = self.gbps / self.peak_gbps if self.gbps and self.peak_gbps else None
        return out


def peak_gbps(backend, index: int = 0) -> float | None:
    """The device's peak memory bandwidth in GB/s, where the runtime reports one."""
    peak = getattr(backend.runtime, "memory_bandwidth_peak", None)
    value = peak(index) if callable(peak) else None
    return value / 1e9 if value else None


def timed(stream, device, enqueue, repeats: int) -> float:
    """Seconds per call of ``enqueue()`` on ``stream``: one warm-up, then ``repeats`` calls between
    two timing events."""
    enqueue()
    start, end = device.create_event(timing=True), device.create_event(timing=True)
    try:
        stream.record(start)
        for _ in range(repeats):
            enqueue()
        stream.record(end)
        end.synchronize()
        return start.elapsed_ms(end) / 1e3 / repeats
    finally:
        start.close()
        end.close()


def bandwidth_bytes(device) -> int:
    """The buffer size of the memset and copy measurements: 1/8 of the free memory, at most 1 GiB."""
    return max(MiB, min(1 << 30, device.memory_info().free // 8)) & ~(MiB - 1)


def format_cell(m: dict | None) -> str:
    """``3.21 TB/s (67% of 4.80 TB/s)``, ``412 GB/s``, or why it was not measured."""
    if not m:
        return "-"
    if m.get("error"):
        return f"not measured: {m['error']}"[:80]
    text = _rate(m["gbps"])
    if m.get("of_peak"):
        text += f" ({100 * m['of_peak']:.0f}% of {_rate(m['peak_gbps'])})"
    if m.get("note"):
        text += f", {m['note']}"
    return text


def _rate(gbps: float) -> str:
    return f"{gbps / 1e3:.2f} TB/s" if gbps >= 1000 else f"{gbps:.3g} GB/s"


def performance_table(performance: dict[str, dict[str, dict]]) -> str:
    """The Markdown performance table: a row per backend, a column per metric."""
    if not performance:
        return ""
    lines = ["", "Performance (measured with the backend's timing events; never pass/fail):", "",
             "| backend | " + " | ".join(HEADERS.get(m, m) for m in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for backend in sorted(performance):
        row = performance[backend]
        lines.append(f"| {backend} | " + " | ".join(format_cell(row.get(metric)).replace("|", "/") for metric in METRICS) + " |")
    return "\n".join(lines) + "\n"
