"""Performance: memset, device copy, all_reduce bus bandwidth and the linear kernel, measured for the
report's performance row (``performance.py``). These checks measure; they never fail a backend for
being slow, and a call that errors is reported as not measured (its behaviour checks fail it)."""
from __future__ import annotations

import pytest
import torch

from anydev.conformance.performance import MiB, Measurement, bandwidth_bytes, bus_bandwidth, peak_gbps, timed
from anydev.conformance.report import PERFORMANCE_KEY
from anydev.conformance.support import max_ranks, require_torch_bridge, run_ranks
from anydev.plugin_api import AnydevError

pytestmark = pytest.mark.performance

REPEATS = 5


def record(request, measurement: Measurement) -> None:
    request.node.user_properties.append((PERFORMANCE_KEY, measurement.as_dict()))


def measure(request, metric: str, body) -> None:
    """Record ``body()`` (a Measurement); an error of the backend is recorded as not measured."""
    try:
        measurement = body()
    except AnydevError as exc:
        measurement = Measurement(metric, error=f"{type(exc).__name__}: {exc}")
    record(request, measurement)


def test_memset_bandwidth(backend, device, stream, request):
    def body() -> Measurement:
        nbytes = bandwidth_bytes(device)
        buf = device.alloc(nbytes)
        try:
            seconds = timed(stream, device, lambda: stream.memset_async(buf, 0x5A), REPEATS)
        finally:
            stream.synchronize()
            buf.free()
        return Measurement("memset", nbytes, seconds, nbytes / seconds / 1e9, peak_gbps(backend))

    measure(request, "memset", body)


def test_device_copy_bandwidth(backend, device, stream, request):
    def body() -> Measurement:
        nbytes = bandwidth_bytes(device) // 2
        src, dst = device.alloc(nbytes), device.alloc(nbytes)
        try:
            stream.memset_async(src, 1)
            seconds = timed(stream, device, lambda: stream.memcpy_async(dst, src), REPEATS)
        finally:
            stream.synchronize()
            src.free()
            dst.free()
        return Measurement("device copy", nbytes, seconds, 2 * nbytes / seconds / 1e9, peak_gbps(backend),
                           note="read + written")

    measure(request, "device copy", body)


def test_all_reduce_bus_bandwidth(backend, request):
    n = max_ranks(backend, request)

    def body() -> Measurement:
        comms = backend.create_communicators([backend.device(i) for i in range(n)])
        cap = 16 * MiB if backend.torch_device_type == "cpu" else 256 * MiB   # host-memory collectives are slow
        nbytes = max(MiB, min(cap, backend.device(0).memory_info().free // 16)) & ~(MiB - 1)
        count = nbytes // 4

        def rank_body(rank: int) -> float:
            device = comms[rank].device
            device.set_current()
            stream = device.create_stream()
            buf = device.alloc(nbytes)
            try:
                stream.memset_async(buf, 0)
                return timed(stream, device, lambda: comms[rank].all_reduce(buf, op="sum", stream=stream, count=count,
                                                                            dtype="float32"), REPEATS)
            finally:
                stream.synchronize()
                buf.free()
                stream.close()

        try:
            seconds = max(run_ranks(n, rank_body, "timed all_reduce"))
        finally:
            run_ranks(n, lambda rank: comms[rank].close(), "destroying the timed communicators")
        note = "1 rank: algorithm bandwidth" if n == 1 else f"at {n} ranks"
        return Measurement("all_reduce", nbytes, seconds, bus_bandwidth(nbytes / seconds / 1e9, n), None, n, note=note)

    measure(request, "all_reduce", body)


def test_linear_kernel_bandwidth(backend, device, stream, request):
    require_torch_bridge(backend)

    def body() -> Measurement:
        kernels = backend.kernels()
        which = "native" if "linear" in kernels.native else "torch reference"
        size = 2048 if device.torch_device.type == "cpu" else 8192
        weight_buf, x_buf = device.alloc(size * size * 2), device.alloc(size * 2)
        try:
            weight = weight_buf.as_tensor(torch.bfloat16, (size, size))
            x = x_buf.as_tensor(torch.bfloat16, (1, size))
            with stream.torch_stream():
                weight.normal_(0, 0.02)
                x.normal_()
                seconds = timed(stream, device, lambda: kernels.linear(x, weight), REPEATS)
        finally:
            stream.synchronize()
            weight_buf.free()
            x_buf.free()
        nbytes = size * size * 2 + 2 * size * 2
        return Measurement("linear", nbytes, seconds, nbytes / seconds / 1e9, peak_gbps(backend),
                           note=f"{which}, 1 x {size} x {size} bfloat16")

    measure(request, "linear", body)
