"""Plans of the linear kernel family measured on a device, which :func:`.linear.plan` takes before its
heuristic: the best of ``benchmarks/linear_bench.py --sweep --table-out`` per device, rows bucket,
weight format and GEMM shape. A shape, format or device missing here runs the heuristic's plan.

To record a device: run the sweep on it with ``--table-out FILE`` and paste FILE's entries into
``RECORDED``; the run itself (date, commit, command, the sweep's output) goes in results/.
"""
from __future__ import annotations

import functools

import torch

#: Rows (the ``T`` of ``x``) are looked up by the smallest of these at least as large; more rows than
#: the last have no recorded plans.
ROW_BUCKETS = (1, 16, 32, 64)

#: (device name, rows bucket, weight format or "dense", N, K) ->
#: (block_m, block_n, block_k, split, num_warps, num_stages[, weights_first]). A GGUF format's batch-1
#: plans are those of the integer-dot GEMV (bfloat16 activations); ``weights_first`` (default False) is
#: ``linear.Plan.weights_first`` of a ``tl.dot`` tile.
RECORDED: dict[tuple[str, int, str, int, int], tuple] = {
    ('NVIDIA H200', 1, 'dense', 4096, 4096): (1, 16, 512, 1, 8, None),
    ('NVIDIA H200', 1, 'dense', 16384, 2048): (1, 16, 256, 1, 4, None),
    ('NVIDIA H200', 1, 'dense', 28672, 4096): (1, 64, 128, 1, 8, None),
    ('NVIDIA H200', 1, 'fp8_e4m3', 4096, 4096): (1, 16, 512, 1, 8, None),
    ('NVIDIA H200', 1, 'fp8_e4m3', 4096, 14336): (1, 16, 512, 4, 4, None),
    ('NVIDIA H200', 1, 'fp8_e4m3', 16384, 2048): (1, 32, 512, 1, 8, None),
    ('NVIDIA H200', 1, 'fp8_e4m3', 28672, 4096): (1, 32, 256, 1, 4, None),
    ('NVIDIA H200', 1, 'int8', 4096, 4096): (1, 16, 512, 1, 8, None),
    ('NVIDIA H200', 1, 'int8', 4096, 14336): (1, 16, 512, 14, 4, None),
    ('NVIDIA H200', 1, 'int8', 28672, 4096): (1, 16, 512, 1, 4, None),
    ('NVIDIA H200', 32, 'int8', 28672, 4096): (32, 128, 256, 1, 4, 3),
    ('NVIDIA H200', 32, 'int8', 128256, 4096): (32, 128, 256, 1, 4, 3),
    ('NVIDIA H200', 32, 'int8', 4096, 4096): (32, 64, 128, 4, 4, 3),
    ('NVIDIA H200', 32, 'int8', 4096, 14336): (32, 64, 128, 8, 4, 3),
    ('NVIDIA H200', 32, 'int8', 6144, 4096): (32, 64, 128, 4, 4, 3),
    ('NVIDIA H200', 32, 'fp8_e4m3', 4096, 4096): (32, 64, 128, 4, 4, 3),
    ('NVIDIA H200', 32, 'fp8_e4m3', 4096, 14336): (32, 128, 256, 8, 4, 3),
    ('NVIDIA H200', 32, 'fp8_e4m3', 6144, 4096): (32, 64, 128, 4, 4, 3),
    ('NVIDIA H200', 32, 'fp8_e4m3', 28672, 4096): (32, 128, 256, 1, 4, 3),
    ('NVIDIA H200', 32, 'fp8_e4m3', 128256, 4096): (32, 128, 256, 1, 4, 3),
    ('NVIDIA H200', 32, 'q8_0', 4096, 4096): (32, 64, 128, 8, 4, 4),
    ('NVIDIA H200', 32, 'q8_0', 4096, 14336): (32, 64, 128, 8, 4, 4),
    ('NVIDIA H200', 32, 'q8_0', 6144, 4096): (32, 64, 256, 4, 4, 3),
    ('NVIDIA H200', 32, 'q8_0', 28672, 4096): (32, 64, 128, 1, 4, 3),
    ('NVIDIA H200', 32, 'q8_0', 128256, 4096): (32, 64, 128, 1, 4, 3),
    ('NVIDIA H200', 1, 'q4_k', 4096, 4096): (1, 64, 256, 8, 4, None),
    ('NVIDIA H200', 1, 'q4_k', 4096, 14336): (1, 32, 256, 8, 1, None),
    ('NVIDIA H200', 1, 'q4_k', 6144, 4096): (1, 64, 256, 8, 4, None),
    ('NVIDIA H200', 1, 'q4_k', 28672, 4096): (1, 32, 256, 2, 1, None),
    ('NVIDIA H200', 1, 'q8_0', 4096, 4096): (1, 64, 256, 8, 2, None),
    ('NVIDIA H200', 1, 'q8_0', 4096, 14336): (1, 64, 512, 4, 2, None),
    ('NVIDIA H200', 1, 'q8_0', 6144, 4096): (1, 64, 256, 4, 2, None),
    ('NVIDIA H200', 1, 'q8_0', 28672, 4096): (1, 128, 256, 1, 4, None),
    ('NVIDIA H200', 1, 'q6_k', 4096, 4096): (1, 64, 512, 8, 4, None),
    ('NVIDIA H200', 1, 'q6_k', 6144, 4096): (1, 32, 512, 8, 1, None),
    ('NVIDIA H200', 1, 'q6_k', 28672, 4096): (1, 32, 512, 1, 1, None),
    ('NVIDIA H100 80GB HBM3', 1, 'fp8_e4m3', 4096, 4096): (1, 64, 512, 4, 8, None),
    ('NVIDIA H100 80GB HBM3', 1, 'fp8_e4m3', 4096, 14336): (1, 64, 512, 4, 8, None),
    ('NVIDIA H100 80GB HBM3', 1, 'fp8_e4m3', 6144, 4096): (1, 16, 1024, 1, 8, None),
    ('NVIDIA H100 80GB HBM3', 1, 'fp8_e4m3', 28672, 4096): (1, 16, 512, 1, 4, None),
    ('NVIDIA H100 80GB HBM3', 1, 'int8', 4096, 4096): (1, 16, 1024, 2, 4, None),
    ('NVIDIA H100 80GB HBM3', 1, 'int8', 4096, 14336): (1, 32, 512, 4, 8, None),
    ('NVIDIA H100 80GB HBM3', 1, 'int8', 6144, 4096): (1, 64, 512, 4, 4, None),
    ('NVIDIA H100 80GB HBM3', 1, 'int8', 28672, 4096): (1, 16, 512, 1, 4, None),
    ('NVIDIA H100 80GB HBM3', 1, 'q8_0_split', 4096, 4096): (1, 16, 512, 4, 4, None),
    ('NVIDIA H100 80GB HBM3', 1, 'q8_0_split', 4096, 14336): (1, 16, 1024, 2, 4, None),
    ('NVIDIA H100 80GB HBM3', 1, 'q8_0_split', 6144, 4096): (1, 16, 1024, 1, 8, None),
    ('NVIDIA H100 80GB HBM3', 1, 'q8_0_split', 28672, 4096): (1, 16, 1024, 1, 8, None),
    ('NVIDIA H100 80GB HBM3', 32, 'q8_0_split', 4096, 14336): (32, 64, 128, 8, 4, 3),
    ('NVIDIA H100 80GB HBM3', 32, 'q8_0_split', 28672, 4096): (32, 64, 128, 2, 4, 3),
    ('NVIDIA H100 80GB HBM3', 1, 'q4_k', 4096, 4096): (1, 32, 256, 8, 2, None),
    ('NVIDIA H100 80GB HBM3', 1, 'q4_k', 4096, 14336): (1, 32, 256, 8, 1, None),
    ('NVIDIA H100 80GB HBM3', 1, 'q4_k', 6144, 4096): (1, 64, 256, 8, 4, None),
    ('NVIDIA H100 80GB HBM3', 1, 'q4_k', 28672, 4096): (1, 64, 256, 2, 4, None),
    ('NVIDIA H100 80GB HBM3', 32, 'q4_k', 4096, 4096): (32, 64, 256, 4, 4, 4, True),
    ('NVIDIA H100 80GB HBM3', 32, 'q4_k', 4096, 14336): (32, 64, 256, 4, 4, 4, True),
    ('NVIDIA H100 80GB HBM3', 32, 'q4_k', 28672, 4096): (32, 64, 256, 2, 4, 3, True),
    ('NVIDIA H100 80GB HBM3', 32, 'q6_k', 4096, 4096): (32, 64, 256, 4, 4, 4, True),
    ('NVIDIA H100 80GB HBM3', 32, 'q6_k', 4096, 14336): (32, 64, 256, 4, 4, 3, True),
}


def rows_bucket(rows: int, buckets: tuple[int, ...] = ROW_BUCKETS) -> int | None:
    """The smallest of ``buckets`` (ascending; default :data:`ROW_BUCKETS`) at least ``rows``, or None past the last."""
    return next((bucket for bucket in buckets if rows <= bucket), None)


@functools.lru_cache(maxsize=None)
def device_name(device: torch.device) -> str:
    """The name plans are recorded under: the accelerator's product name (``torch.cuda.get_device_name``
    or its vendor's copy), the device type where there is none (Triton's interpreter: "cpu")."""
    module = getattr(torch, device.type, None)
    if device.type != "cpu" and hasattr(module, "get_device_name"):
        return module.get_device_name(device)
    return device.type


def recorded_plan(rows: int, N: int, K: int, weight_format: str, device: torch.device,
                  table: dict | None = None) -> tuple | None:
    """The recorded (block_m, block_n, block_k, split, num_warps, num_stages[, weights_first]) of this
    call, or None."""
    bucket = rows_bucket(rows)
    if bucket is None:
        return None
    return (RECORDED if table is None else table).get((device_name(device), bucket, weight_format, N, K))
