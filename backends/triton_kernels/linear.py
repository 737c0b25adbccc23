"""linear and quantized_linear (contract 1.5, see ``anydev.plugin_api.kernels``): one kernel family for
a float weight and every quantized format, made for decode's small ``T``, where a step's time is the
time to read the weights.

A program computes ``BLOCK_N`` outputs of ``BLOCK_M`` rows over one slice of ``K`` (split-K: the
last slice to finish an output tile adds up the slices' float32 sums, :mod:`._split_k`), loading each
weight tile once: at ``BLOCK_M == 1`` as a GEMV (multiply and sum), otherwise with ``tl.dot`` on the
tile dequantized to the activations' dtype. :func:`plan` picks the blocks and the split by shape: a
plan measured on the device where :mod:`.linear_plans` records one, else a fixed heuristic (enough
programs to fill the device, :func:`~._common.programs_to_fill`). A float weight at
``T > DENSE_MAX_ROWS`` goes to torch's matmul (the vendor library is at its bandwidth there).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from anydev.plugin_api.errors import InvalidArgumentError
from anydev.plugin_api.weight_formats import CHANNEL_FORMATS, SPLIT_FORMATS, check_weight, row_bytes

from ._common import (check_last_dim_contiguous, dot, dot_precision, next_power_of_2, pdl, pdl_wait, prefetch_rows,
                      programs_to_fill, tl, triton, upcast_dots)
from ._gguf_int_chunks import q4_0_int_chunks, q4_1_int_chunks, q8_0_int_chunks
from ._gguf_int_gemv import q4_0_int_gemv, q4_1_int_gemv, q4_k_int_block, q6_k_int_pair, q8_0_int_gemv
from ._gguf_tiles import block32_gemv, block32_values, k_quant_tile, q4_k_gemv_block, q6_k_gemv_block
from ._split_k import arrival_counters, store_summed
from ._weight_tiles import (CODES, codes_float, q6_split_halves, q6_split_inputs, q6_split_tile, split_group_sums,
                            split_tile, stored_values, weight_tile)
from .linear_plans import recorded_plan

#: Rows up to which a float weight runs this kernel; above, torch's matmul (cuBLAS on nvidia).
DENSE_MAX_ROWS = 16
#: The formats whose tiles are whole 256-value super-blocks (a plan's ``block_k`` must be 256).
K_QUANTS = ("q4_k", "q6_k")
#: The inputs a step of each split-row format takes a multiple of (``q6_k_split``: its ``d`` per 256).
SPLIT_STEP = {"q8_0_split": 32, "q6_k_split": 256}
#: The formats whose ``tl.dot`` tiles take whole 256-value super-blocks (``q6_k_split``: a ``d`` per 256).
SUPER_BLOCK_TILES = K_QUANTS + tuple(fmt for fmt, step in SPLIT_STEP.items() if step == 256)
#: The GGUF formats of 32-value blocks (:func:`._gguf_tiles.block32_gemv`).
BLOCK32_FORMATS = ("q8_0", "q4_0", "q4_1")
#: The formats whose ``tl.dot`` tiles the heuristic makes the dot's first operand (``Plan.weights_first``):
#: the nibble formats, whose unpacking dominates a tile. On an H100 at batch 32 that cut the 8B GEMMs'
#: time a token 1.11-1.19x (q4_k, q4_0, q4_1); int8 and q8_0_split were 5-6% slower so, and q6_k gained
#: in some GEMMs and lost in others (results/README.md lists the runs).
WEIGHTS_FIRST_FORMATS = ("q4_k", "q4_0", "q4_1", "q6_k_split")


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one call is launched: the blocks, ``split`` slices of ``k_per_split`` inputs, the warps, the
    software pipeline's stages (None: Triton's default) and, for a batch-1 GEMV of GGUF blocks, whether
    its steps are integer dots on int8 activations (:func:`int_dots` says where that may be chosen) and
    whether those of the 32-value blocks read eight blocks a row in aligned 16-byte chunks
    (:mod:`._gguf_int_chunks`, :func:`int_chunks` says where) rather than a block's words one a load;
    and, for ``tl.dot`` tiles (``block_m > 1``), whether the weight tile is the dot's first operand
    (``weights_first``: ``W x^T``, the outputs as the MMA's rows, which sm_90 runs as ``wgmma`` once
    ``block_n`` is 64) rather than its second (``x W^T``, the batch's rows as the MMA's rows)."""
    block_m: int
    block_n: int
    block_k: int
    split: int
    k_per_split: int
    num_warps: int = 4
    num_stages: int | None = None
    int_dot: bool = False
    int_chunks: bool = False
    weights_first: bool = False

    @classmethod
    def sliced(cls, M: int, K: int, block_m: int, block_n: int, block_k: int, split: int, num_warps: int = 4,
               num_stages: int | None = None, int_dot: bool = False, int_chunks: bool = False,
               weights_first: bool = False) -> "Plan":
        """A plan of ``split`` K slices of whole tiles (fewer where ``K`` has fewer tiles)."""
        k_per_split = triton.cdiv(triton.cdiv(K, block_k), split) * block_k
        return cls(block_m, block_n, block_k, triton.cdiv(K, k_per_split), k_per_split, num_warps, num_stages,
                   int_dot, int_chunks, weights_first)


def plan(M: int, N: int, K: int, weight_format: str, device: torch.device, dtype: torch.dtype | None = None) -> Plan:
    """The plan :mod:`.linear_plans` records for this device and shape, else the fixed heuristic
    (the sweep it comes from is listed in results/README.md).

    ``M == 1``: dense, int8 and fp8 by a GEMV of 16 outputs per program and 8 warps over tiles of 512
    inputs (the sweep's best; the split rows 1,024: ``q8_0_split`` a scale per 32 of them, ``q6_k_split``
    each 16-value group's halves against their inputs); GGUF blocks by :mod:`._gguf_tiles`, 32 rows a program, 4 warps:
    ``q4_k``/``q6_k`` one super-block a step, ``q8_0``/``q4_0``/``q4_1`` four 32-value blocks; with
    ``dtype`` bfloat16 where :func:`int_dots` allows, by the integer dots of :mod:`._gguf_int_gemv`, 64
    rows a program (``q4_k``/``q6_k`` 128) over 256 inputs (``q6_k`` 512: an aligned pair of super-blocks; the
    activations' rounding to int8 is paid once a step for all of its rows; the fewest instructions a
    value without spilling registers, in the sm_90 SASS); ``q8_0``/``q4_0``/``q4_1`` with ``K`` a multiple of
    256 in aligned chunks (:func:`int_chunks`), 128 rows a program over 256 inputs (a row's step a
    thread at 4 warps). ``M > 1``:
    ``tl.dot`` tiles of 16-64 rows, 64 outputs, 64 inputs (``q8_0_split`` 128; ``q4_k``/``q6_k``/``q6_k_split``:
    one super-block, ``q6_k`` 32 outputs, :func:`._gguf_tiles.k_quant_tile`), 4 warps, the weights the dot's
    first operand for :data:`WEIGHTS_FIRST_FORMATS`. Then K is split in two, four, ... while the programs stay
    within ``programs_to_fill(device)`` and each slice keeps 4 tiles (splitting costs a store and a
    reload of the partial sums, more than it gains on short K: measured best unsplit at K = 2048)."""
    int_dot = M == 1 and dtype is not None and int_dots(weight_format, dtype, K)
    recorded = recorded_plan(M, N, K, weight_format, device)
    if M == 1 and weight_format in INT_DOT_TILE and not int_dot:
        recorded = None     # a GGUF format's batch-1 plans are its integer-dot GEMV's (bfloat16 activations)
    if recorded is not None:
        block_m, block_n, block_k, split, num_warps, num_stages, *weights_first = recorded
        int_dot = int_dot and int_dot_tile(weight_format, block_k)
        return Plan.sliced(M, K, block_m, block_n, block_k, split, num_warps, num_stages, int_dot,
                           int_dot and int_chunks(weight_format, K, block_k), bool(weights_first and weights_first[0]))
    chunks = int_dot and int_chunks(weight_format, K, 256)
    if int_dot:
        block_m, block_n, num_warps = 1, 128 if weight_format in K_QUANTS or chunks else 64, 4
        block_k = 512 if weight_format == "q6_k" else 256
    elif M == 1 and weight_format in K_QUANTS:     # q4_k/q6_k_gemv_block: one super-block a step
        block_m, block_n, block_k, num_warps = 1, 32, 256, 4
    elif M == 1 and weight_format in BLOCK32_FORMATS:     # block32_gemv: 4 blocks a step
        block_m, block_n, block_k, num_warps = 1, 32, 128, 4
    elif M == 1:        # q8_0_split: 1,024 inputs a step, as many bytes as bf16's 512
        block_m, block_n, block_k, num_warps = 1, 16, 1024 if weight_format in SPLIT_FORMATS else 512, 8
    else:
        block_m = 16 if M <= 16 else 32 if M <= 32 else 64
        block_n, block_k, num_warps = (32 if weight_format == "q6_k" else 64, 256, 4) \
            if weight_format in SUPER_BLOCK_TILES else (64, 128, 4) if weight_format in SPLIT_FORMATS else (64, 64, 4)
    tiles = triton.cdiv(K, block_k)
    programs = triton.cdiv(N, block_n) * triton.cdiv(M, block_m)
    split = 1
    while programs * split * 2 <= programs_to_fill(device) and tiles // (split * 2) >= 4:
        split *= 2
    return Plan.sliced(M, K, block_m, block_n, block_k, split, num_warps, int_dot=int_dot, int_chunks=chunks,
                       weights_first=M > 1 and weight_format in WEIGHTS_FIRST_FORMATS)


@triton.jit
def _linear_kernel(x_ptr, w_ptr, scales_ptr, out_ptr, partial_ptr, counters_ptr, M, N, K, stride_xm, ROW_BYTES,
                   K_PER_SPLIT, FORMAT: tl.constexpr, CHANNEL_SCALES: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SLICES: tl.constexpr, PRECISION: tl.constexpr,
                   UPCAST: tl.constexpr, INT_DOT: tl.constexpr = False, INT_CHUNKS: tl.constexpr = False,
                   ASM: tl.constexpr = False, USE_PDL: tl.constexpr = 0, WEIGHTS_FIRST: tl.constexpr = False,
                   PREFETCH_LINES: tl.constexpr = 0):
    pid_n, pid_k, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    k_start = pid_k.to(tl.int64) * K_PER_SPLIT
    if USE_PDL == 3:    # the weights are no earlier kernel's output: their first tile is asked for before the wait
        prefetch_rows(w_ptr, tl.minimum(n, N - 1), ROW_BYTES, K, k_start, K_PER_SPLIT, PREFETCH_LINES)
    pdl_wait(USE_PDL)
    # At BLOCK_M == 1 each step's products are summed by the thread that holds them, into [BLOCK_N]
    # (q4_k: per sub-block, [BLOCK_N, 4]); q6_k and the 32-value blocks add theirs up elementwise in
    # a tile of the step's shape and sum once after the loop. Each is the faster of the two. With
    # INT_DOT (GGUF blocks, bfloat16 activations) the steps are integer dots (:mod:`._gguf_int_gemv`).
    if BLOCK_M == 1 and INT_CHUNKS:     # q8_0, q4_0, q4_1 in aligned chunks: a sum a step of eight blocks
        acc = tl.zeros((BLOCK_N, BLOCK_K // 256), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 6:
        acc = tl.zeros((BLOCK_N, 4), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 7 and INT_DOT:
        acc = tl.zeros((BLOCK_N, 2, 2), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 3 and INT_DOT:
        acc = tl.zeros((BLOCK_N, BLOCK_K // 64, 8), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 4 and INT_DOT:
        acc = tl.zeros((BLOCK_N, BLOCK_K // 64, 2), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 5 and INT_DOT:
        acc = tl.zeros((BLOCK_N, BLOCK_K // 32, 4), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 7:
        acc = tl.zeros((BLOCK_N, 8, 16), dtype=tl.float32)
    elif BLOCK_M == 1 and (FORMAT == 3 or FORMAT == 4 or FORMAT == 5):
        acc = tl.zeros((BLOCK_N, BLOCK_K // 32, 32), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 8:
        acc = tl.zeros((BLOCK_K // 32, BLOCK_N), dtype=tl.float32)
    elif BLOCK_M == 1 and FORMAT == 9:
        acc = tl.zeros((BLOCK_K // 16, BLOCK_N), dtype=tl.float32)
    elif BLOCK_M == 1:
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    elif WEIGHTS_FIRST:     # W x^T: the outputs are the rows of the MMA, transposed once after the loop
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.minimum(K_PER_SPLIT, K - k_start), BLOCK_K):     # the last slice may be short
        k = k_start + k0 + tl.arange(0, BLOCK_K)
        if BLOCK_M == 1 and INT_CHUNKS and FORMAT == 3:
            acc += q8_0_int_chunks(w_ptr, x_ptr + pid_m * stride_xm, n, (k_start + k0) // 256, N, K, ROW_BYTES,
                                   BLOCK_N, BLOCK_K // 256, ASM)
        elif BLOCK_M == 1 and INT_CHUNKS and FORMAT == 4:
            acc += q4_0_int_chunks(w_ptr, x_ptr + pid_m * stride_xm, n, (k_start + k0) // 256, N, K, ROW_BYTES,
                                   BLOCK_N, BLOCK_K // 256, ASM)
        elif BLOCK_M == 1 and INT_CHUNKS:
            acc += q4_1_int_chunks(w_ptr, x_ptr + pid_m * stride_xm, n, (k_start + k0) // 256, N, K, ROW_BYTES,
                                   BLOCK_N, BLOCK_K // 256, ASM)
        elif BLOCK_M == 1 and FORMAT == 6 and INT_DOT:
            acc += q4_k_int_block(w_ptr, x_ptr + pid_m * stride_xm, n, (k_start + k0) // 256, N, ROW_BYTES, BLOCK_N, ASM)
        elif BLOCK_M == 1 and FORMAT == 7 and INT_DOT:     # q6_k: BLOCK_K 512, a pair of super-blocks
            acc += q6_k_int_pair(w_ptr, x_ptr + pid_m * stride_xm, n, (k_start + k0) // 512, N, K, ROW_BYTES, BLOCK_N,
                                 ASM)
        elif BLOCK_M == 1 and FORMAT == 3 and INT_DOT:
            acc += q8_0_int_gemv(w_ptr, x_ptr + pid_m * stride_xm, n, k_start + k0, N, K, ROW_BYTES, BLOCK_N,
                                 BLOCK_K // 64, ASM)
        elif BLOCK_M == 1 and FORMAT == 4 and INT_DOT:
            acc += q4_0_int_gemv(w_ptr, x_ptr + pid_m * stride_xm, n, k_start + k0, N, K, ROW_BYTES, BLOCK_N,
                                 BLOCK_K // 64, ASM)
        elif BLOCK_M == 1 and FORMAT == 5 and INT_DOT:
            acc += q4_1_int_gemv(w_ptr, x_ptr + pid_m * stride_xm, n, k_start + k0, N, K, ROW_BYTES, BLOCK_N,
                                 BLOCK_K // 32, ASM)
        elif BLOCK_M == 1 and FORMAT == 6:         # q4_k (then q6_k): one super-block a tile
            acc += q4_k_gemv_block(w_ptr, x_ptr + pid_m * stride_xm, n, (k_start + k0) // 256, N, K, ROW_BYTES, BLOCK_N)
        elif BLOCK_M == 1 and FORMAT == 7:
            acc += q6_k_gemv_block(w_ptr, x_ptr + pid_m * stride_xm, n, (k_start + k0) // 256, N, K, ROW_BYTES, BLOCK_N)
        elif BLOCK_M == 1 and (FORMAT == 3 or FORMAT == 4 or FORMAT == 5):     # q8_0, q4_0, q4_1: per block
            acc += block32_gemv(w_ptr, x_ptr + pid_m * stride_xm, n, k_start + k0, N, K, ROW_BYTES, FORMAT, BLOCK_N,
                                BLOCK_K // 32)
        elif BLOCK_M == 1 and FORMAT == 8:        # q8_0_split: the int8 GEMV's tile, a scale per 32
            xk = tl.load(x_ptr + pid_m * stride_xm + k, mask=k < K, other=0.0).to(tl.float32)
            acc += split_group_sums(w_ptr, xk, n, k_start + k0, N, K, ROW_BYTES, BLOCK_K, BLOCK_N, ASM)
        elif BLOCK_M == 1 and FORMAT == 9:        # q6_k_split: a group's two halves against their inputs
            first, second, scale = q6_split_halves(w_ptr, n, k_start + k0, N, K, ROW_BYTES, BLOCK_K, BLOCK_N)
            at_first, at_second = q6_split_inputs(k_start + k0, BLOCK_K // 16)
            x_row = x_ptr + pid_m * stride_xm
            x_first = tl.load(x_row + at_first, mask=at_first < K, other=0.0).to(tl.float32)
            x_second = tl.load(x_row + at_second, mask=at_second < K, other=0.0).to(tl.float32)
            acc += tl.sum(first * x_first[:, :, None] + second * x_second[:, :, None], axis=1) * scale
        elif BLOCK_M == 1:
            if FORMAT == 1:     # int8 four codes a word (the compiler's bf16 operand of tl.dot has its own)
                w = codes_float(stored_values(w_ptr, n[None, :], k[:, None], N, K), ASM)
            else:
                w = weight_tile(w_ptr, n[None, :], k[:, None], N, K, FORMAT)   # [BLOCK_K, BLOCK_N]
            xk = tl.load(x_ptr + pid_m * stride_xm + k, mask=k < K, other=0.0).to(tl.float32)
            acc += tl.sum(w * xk[:, None], axis=0)
        else:
            if FORMAT == 6 or FORMAT == 7:     # q4_k, q6_k: a super-block a tile (BLOCK_K 256)
                w = k_quant_tile(w_ptr, n, (k_start + k0) // 256, N, ROW_BYTES, FORMAT, BLOCK_N)
            elif FORMAT == 3 or FORMAT == 4 or FORMAT == 5:     # q8_0, q4_0, q4_1: whole blocks, in input order
                w = tl.trans(tl.reshape(block32_values(w_ptr, n, k_start + k0, N, K, ROW_BYTES, FORMAT, BLOCK_N,
                                                       BLOCK_K // 32), (BLOCK_N, BLOCK_K)))
            elif FORMAT == 8:
                w = split_tile(w_ptr, n, k_start + k0, N, K, ROW_BYTES, BLOCK_K, BLOCK_N)
            elif FORMAT == 9:
                w = q6_split_tile(w_ptr, n, k_start + k0, N, K, ROW_BYTES, BLOCK_K, BLOCK_N)
            else:
                w = weight_tile(w_ptr, n[None, :], k[:, None], N, K, FORMAT)
            if WEIGHTS_FIRST:
                xt = tl.load(x_ptr + m[None, :] * stride_xm + k[:, None], mask=(m[None, :] < M) & (k[:, None] < K), other=0.0)
                acc = acc + dot(tl.trans(w).to(x_ptr.dtype.element_ty), xt, PRECISION, UPCAST)
            else:
                xk = tl.load(x_ptr + m[:, None] * stride_xm + k[None, :], mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
                acc = acc + dot(xk, w.to(x_ptr.dtype.element_ty), PRECISION, UPCAST)
    if BLOCK_M > 1 and WEIGHTS_FIRST:
        acc = tl.trans(acc)
    if BLOCK_M == 1 and (FORMAT == 6 or INT_CHUNKS):
        acc = tl.sum(acc, axis=1)
    elif BLOCK_M == 1 and (FORMAT == 8 or FORMAT == 9):
        acc = tl.sum(acc, axis=0)
    elif BLOCK_M == 1 and FORMAT >= 3:
        acc = tl.sum(tl.sum(acc, axis=2), axis=1)
    if CHANNEL_SCALES:
        acc = acc * tl.load(scales_ptr + n, mask=n < N, other=0.0)
    if BLOCK_M == 1:
        store_summed(acc, out_ptr, partial_ptr, counters_ptr, pid_m * N + n, n < N, M, N, SLICES)
    else:
        store_summed(acc, out_ptr, partial_ptr, counters_ptr, m[:, None] * N + n[None, :],
                     (m[:, None] < M) & (n[None, :] < N), M, N, SLICES)


#: The GGUF formats whose batch-1 GEMV runs on int8 activations, each with the inputs its step takes:
#: a multiple of 64 where the blocks are read in aligned pairs (``q8_0``, ``q4_0``), 512 for a pair of
#: ``q6_k`` super-blocks.
INT_DOT_TILE = {"q4_k": 256, "q8_0": 64, "q4_0": 64, "q4_1": 32, "q6_k": 512}
INT_DOT_FORMATS = tuple(INT_DOT_TILE)
#: The integer-dot formats whose steps may read eight blocks (256 inputs) a row in aligned 16-byte chunks.
INT_CHUNK_FORMATS = BLOCK32_FORMATS


def int_dots(weight_format: str, dtype: torch.dtype, K: int) -> bool:
    """True where the batch-1 GEMV multiplies int8 activations by the weights' codes (:mod:`._int_dot`):
    :data:`INT_DOT_FORMATS` with bfloat16 activations (the rounding fits bfloat16's tolerance only) and
    ``K`` a multiple of the format's :data:`INT_DOT_TILE` (rows and block pairs 4-byte aligned)."""
    return weight_format in INT_DOT_TILE and dtype == torch.bfloat16 and K % INT_DOT_TILE[weight_format] == 0


def int_dot_tile(weight_format: str, block_k: int) -> bool:
    """True where a plan's ``block_k`` suits the integer-dot step of ``weight_format``: exactly its
    :data:`INT_DOT_TILE` for the super-block formats (``q4_k`` one, ``q6_k`` a pair a step), else a
    multiple of it and of 64."""
    tile = INT_DOT_TILE[weight_format]
    return block_k == tile if weight_format in K_QUANTS else block_k % max(tile, 64) == 0


def int_chunks(weight_format: str, K: int, block_k: int) -> bool:
    """True where the integer-dot steps of ``weight_format`` may read aligned 16-byte chunks
    (:mod:`._gguf_int_chunks`): :data:`INT_CHUNK_FORMATS` with ``K`` and ``block_k`` multiples of 256
    (eight blocks a step, every row and step starting 16-byte aligned)."""
    return weight_format in INT_CHUNK_FORMATS and K % 256 == 0 and block_k % 256 == 0


def ptx_asm(device: torch.device) -> bool:
    """The kernel's ``ASM``: True where it is compiled for an NVIDIA GPU, whose PTX runs its inline
    assembly (``dp4a``; the ``prmt`` and float16 pairs of :func:`._weight_tiles.codes_float`). torch's
    ROCm build also names its devices "cuda": not there."""
    return device.type == "cuda" and torch.version.hip is None


def run(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str,
        p: Plan | None = None) -> torch.Tensor:
    """``x @ W.T`` by this kernel family with plan ``p`` (default: :func:`plan`'s); ``weight_format``
    "dense" for a float weight of ``x``'s dtype. (benchmarks/linear_bench.py sweeps plans through it.)"""
    check_last_dim_contiguous("x", x)
    if x.dim() != 2:
        raise InvalidArgumentError(f"x must be [T, K], got shape {tuple(x.shape)}")
    M, K = x.shape
    N = weight.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return out
    p = p or plan(M, N, K, weight_format, x.device, x.dtype)
    if p.int_dot and not (M == 1 and p.block_m == 1 and int_dots(weight_format, x.dtype, K)
                          and int_dot_tile(weight_format, p.block_k)):
        raise InvalidArgumentError(f"{weight_format}: an integer-dot plan needs one bfloat16 row, K a multiple of "
                                   f"{INT_DOT_TILE.get(weight_format)} and a block_k that suits it "
                                   f"(linear.int_dot_tile), got {p} for {x.dtype} [{M}, {K}]")
    if p.int_chunks and not (p.int_dot and int_chunks(weight_format, K, p.block_k)):
        raise InvalidArgumentError(f"{weight_format}: a plan of aligned chunks needs integer dots, a format of "
                                   f"{INT_CHUNK_FORMATS} and K and block_k multiples of 256, got {p} for K {K}")
    if p.weights_first and p.block_m == 1:
        raise InvalidArgumentError(f"{weight_format}: weights_first is a tl.dot tile's (block_m > 1), got {p}")
    if weight_format in SPLIT_FORMATS and p.block_k % SPLIT_STEP[weight_format]:
        raise InvalidArgumentError(f"{weight_format}: a plan's block_k must be a multiple of "
                                   f"{SPLIT_STEP[weight_format]} (whole groups), got {p}")
    if weight_format in K_QUANTS and p.block_k != 256 and not p.int_dot:
        raise InvalidArgumentError(f"{weight_format}: a plan's block_k must be 256 (one super-block a tile), got {p}")
    grid = (triton.cdiv(N, p.block_n), p.split, M if p.block_m == 1 else triton.cdiv(M, p.block_m))
    split_k = p.split > 1
    partial = torch.empty((p.split, M, N), dtype=torch.float32, device=x.device) if split_k else out
    counters = arrival_counters(x.device, grid[0] * grid[2]) if split_k else out
    row_elems = row_bytes(weight_format, K) if weight_format != "dense" else K
    launch = pdl(x.device)
    if launch["USE_PDL"] == 3:
        launch["PREFETCH_LINES"] = _prefetch_lines(p, row_elems, weight.element_size(), K)
    _linear_kernel[grid](
        x, weight, scales if scales is not None else weight, out, partial, counters, M, N, K, x.stride(0),
        row_elems, p.k_per_split,
        FORMAT=CODES[weight_format], CHANNEL_SCALES=weight_format in CHANNEL_FORMATS,
        BLOCK_M=p.block_m, BLOCK_N=p.block_n, BLOCK_K=p.block_k, SLICES=p.split,
        PRECISION=dot_precision(x.dtype), UPCAST=upcast_dots(x.dtype, x.device),
        INT_DOT=p.int_dot, INT_CHUNKS=p.int_chunks, ASM=ptx_asm(x.device), WEIGHTS_FIRST=p.weights_first,
        num_warps=p.num_warps,
        **launch,
        **({} if p.num_stages is None else {"num_stages": p.num_stages}),
    )
    return out


#: The most 128-byte lines of a row that a program asks the L2 for before it waits (``ANYDEV_TRITON_PDL=3``).
MAX_PREFETCH_LINES = 8


def _prefetch_lines(p: Plan, row_elems: int, elem_bytes: int, K: int) -> int:
    """The lines of each row's first tile (``block_k`` inputs) that a program prefetches."""
    tile_bytes = p.block_k * row_elems * elem_bytes // K
    return min(MAX_PREFETCH_LINES, next_power_of_2(triton.cdiv(tile_bytes, 128)))


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > DENSE_MAX_ROWS:
        return F.linear(x, weight)
    if weight.dim() != 2 or weight.shape[1] != x.shape[-1] or not weight.is_contiguous() or weight.dtype != x.dtype:
        raise InvalidArgumentError(f"weight must be contiguous [N, {x.shape[-1]}] {x.dtype}, got "
                                   f"{weight.dtype} {tuple(weight.shape)}")
    return run(x, weight, None, "dense")


def quantized_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str) -> torch.Tensor:
    check_weight(weight, scales, weight_format, x.shape[-1])
    return run(x, weight, scales, weight_format)
