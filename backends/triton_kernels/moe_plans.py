"""How moe_linear's few-rows GEMV is launched: a plan measured on the device where :data:`RECORDED`
has one, else :func:`heuristic`. A plan is a :class:`.linear.Plan` of one row a program
(``block_m`` 1): the outputs a program computes, the inputs a step reads, the K split, warps, stages.

The grid is (N blocks, K slices, rows): a program reads ``block_n`` rows of its row's expert over one
K slice. At decode the rows are a token's ``top_k`` copies, each on its own expert, so the device's
work is ``rows x N / block_n x split`` programs each streaming ``block_n x k_per_split`` weights:
enough of them, each with a step of several KB in flight, keep HBM busy (Little's law: about 22 KB in
flight per H200 multiprocessor at 4.8 TB/s and ~600 ns).

To record a device: ``benchmarks/moe_bench.py --sweep --table-out FILE`` on it, FILE's lines pasted
into :data:`RECORDED`, the run itself (date, commit, command, output) under results/.
"""
from __future__ import annotations

from ._common import next_power_of_2, programs_to_fill, triton
from .linear import BLOCK32_FORMATS, K_QUANTS, Plan
from .linear_plans import device_name, rows_bucket

#: Rows (``R`` of ``x``) are looked up by the smallest of these at least as large (the GEMV's rows
#: reach ``moe.GEMV_MAX_ROWS``).
ROW_BUCKETS = (1, 2, 4, 8, 16)

#: (device name, rows bucket, weight format or "dense", N, K) -> (block_n, block_k, split, num_warps,
#: num_stages).
RECORDED: dict[tuple[str, int, str, int, int], tuple[int, int, int, int, int | None]] = {}


def gemv_plan(R: int, N: int, K: int, weight_format: str, device, table: dict | None = None) -> Plan:
    """The recorded plan of this call (``table``, default :data:`RECORDED`), else :func:`heuristic`'s."""
    bucket = rows_bucket(R, ROW_BUCKETS)
    recorded = None if bucket is None else (RECORDED if table is None else table).get(
        (device_name(device), bucket, weight_format, N, K))
    if recorded is not None:
        block_n, block_k, split, num_warps, num_stages = recorded
        return Plan.sliced(1, K, 1, block_n, block_k, split, num_warps, num_stages)
    return heuristic(R, N, K, weight_format, programs_to_fill(device))


def heuristic(R: int, N: int, K: int, weight_format: str, fill: int) -> Plan:
    """The GEMV tiles of the linear family's batch-1 sweep on an H200 (results/README.md): q4_k/q6_k
    a super-block a step over 32 outputs, the 32-value blocks four blocks a step; float, int8 and fp8
    16 outputs over 256 inputs and 4 warps up to K = 2048 (the sweep's best at K 2048), 512 inputs and
    8 warps above. Then K is split in two, four, ... while the programs (``rows x N blocks``) stay
    within ``fill`` and each slice keeps 4 steps: few rows of a narrow expert (TP shards, small
    models) otherwise leave most multiprocessors idle."""
    if weight_format in K_QUANTS:
        block_n, block_k, num_warps = 32, 256, 4
    elif weight_format in BLOCK32_FORMATS:
        block_n, block_k, num_warps = 32, 128, 4
    else:
        block_n = 16
        wanted = 256 if K <= 2048 else 512
        block_k = next((b for b in (wanted, 256, 128) if b <= wanted and K % b == 0), min(wanted, next_power_of_2(K)))
        num_warps = 8 if block_k == 512 else 4
    tiles = triton.cdiv(K, block_k)
    programs = triton.cdiv(N, block_n) * R
    split = 1
    while programs * split * 2 <= fill and tiles // (split * 2) >= 4:
        split *= 2
    return Plan.sliced(1, K, 1, block_n, block_k, split, num_warps)


def legacy(N: int, K: int, weight_format: str) -> Plan:
    """The plan of the first GEMV path (one per format, no split: 16 outputs over up to 512 inputs and
    8 warps for float weights), kept for side-by-side runs (``moe_bench.py --plans legacy,chosen``)."""
    if weight_format in K_QUANTS:
        return Plan.sliced(1, K, 1, 32, 256, 1, 4)
    if weight_format in BLOCK32_FORMATS:
        return Plan.sliced(1, K, 1, 32, 128, 1, 4)
    block_k = next((b for b in (512, 256, 128) if K % b == 0), min(512, next_power_of_2(K)))
    return Plan.sliced(1, K, 1, 16, block_k, 1, 8 if weight_format == "dense" else 4)
