"""moe_route and moe_linear (contract 1.7, see ``anydev.plugin_api.kernels``).

``moe_route``: one program (one warp) per token: the softmax of its router logits in registers, then
``top_k`` rounds of "largest probability, lowest index among equals", the picks gathered in registers
and stored at once.

``moe_linear``, up to :data:`GEMV_MAX_ROWS` rows: one GEMV per row, block of ``BLOCK_N`` outputs and
slice of K (split-K through :mod:`._split_k`: the last slice to finish adds the slices' sums), reading
the weight of the row's own expert (the expert's rows start ``expert * N`` rows into the stacked
weight) with the linear family's tiles, so every weight format the linear layers read works here
too; the blocks, the split and the warps by shape (:mod:`.moe_plans`). At decode each token's ``top_k`` rows read ``top_k`` experts: the bytes read are the
active experts' weights. More rows (a batch, a prompt): the rows sorted by expert (a stable sort on
the device: graph-safe), and one program per ``BLOCK_M`` sorted rows and ``BLOCK_N`` outputs that runs
``tl.dot`` once per expert its rows use, each expert's weight tile read once for all its rows there.

``moe_combine`` (contract 1.10): one program per token and :data:`COMBINE_BLOCK` outputs, its
``top_k`` rows' loads issued together (``top_k`` unrolled), summed in float32, stored once.
"""
from __future__ import annotations

import torch

from anydev.plugin_api.errors import InvalidArgumentError
from anydev.plugin_api.weight_formats import CHANNEL_FORMATS, check_weight, row_bytes

from . import moe_plans
from ._common import (
    check_last_dim_contiguous, dot, dot_precision, next_power_of_2, pdl, pdl_wait, tl, triton, upcast_dots,
)
from ._gguf_tiles import block32_gemv, block32_values, k_quant_tile, q4_k_gemv_block, q6_k_gemv_block
from ._split_k import arrival_counters, store_summed
from ._weight_tiles import CODES, int8_float, stored_values, weight_tile
from .linear import K_QUANTS, Plan


@triton.jit
def _route_kernel(logits_ptr, weights_ptr, ids_ptr, E, TOP_K: tl.constexpr, RENORMALIZE: tl.constexpr,
                  BLOCK_E: tl.constexpr, BLOCK_TOP: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, BLOCK_E)
    logits = tl.load(logits_ptr + t * E + e, mask=e < E, other=-float("inf")).to(tl.float32)
    p = tl.exp(logits - tl.max(logits, axis=0))
    p = tl.where(e < E, p / tl.sum(p, axis=0), -1.0)       # past E: below every probability
    slot = tl.arange(0, BLOCK_TOP)
    chosen = tl.zeros((BLOCK_TOP,), dtype=tl.float32)
    chosen_ids = tl.zeros((BLOCK_TOP,), dtype=tl.int64)
    total = 0.0
    left = p
    for j in tl.static_range(TOP_K):
        best = tl.max(left, axis=0)
        index = tl.min(tl.where(left == best, e, BLOCK_E), axis=0)
        chosen = tl.where(slot == j, best, chosen)
        chosen_ids = tl.where(slot == j, index.to(tl.int64), chosen_ids)
        total += best
        left = tl.where(e == index, -1.0, left)
    if RENORMALIZE:
        chosen = chosen / total
    tl.store(weights_ptr + t * TOP_K + slot, chosen, mask=slot < TOP_K)
    tl.store(ids_ptr + t * TOP_K + slot, chosen_ids, mask=slot < TOP_K)


#: One warp a token: its reductions over the experts are warp shuffles, with no shared-memory round
#: trip and barrier each (2 a pick, ``top_k`` picks in a row: the kernel's whole time at decode).
ROUTE_WARPS = 1


def moe_route(router_logits: torch.Tensor, top_k: int, renormalize: bool):
    if router_logits.dim() != 2 or not router_logits.is_contiguous():
        raise InvalidArgumentError(f"router_logits must be contiguous [T, E], got {tuple(router_logits.shape)}")
    T, E = router_logits.shape
    if not 1 <= top_k <= E:
        raise InvalidArgumentError(f"top_k must be in 1..{E} (the experts), got {top_k}")
    weights = torch.empty((T, top_k), dtype=torch.float32, device=router_logits.device)
    ids = torch.empty((T, top_k), dtype=torch.int64, device=router_logits.device)
    if T:
        _route_kernel[(T,)](router_logits, weights, ids, E, TOP_K=top_k, RENORMALIZE=bool(renormalize),
                            BLOCK_E=next_power_of_2(E), BLOCK_TOP=max(2, next_power_of_2(top_k)), num_warps=ROUTE_WARPS)
    return weights, ids


@triton.jit
def _moe_linear_kernel(x_ptr, w_ptr, scales_ptr, ids_ptr, out_ptr, partial_ptr, counters_ptr, R, N, K, stride_x,
                       ROW_BYTES, K_PER_SPLIT, FORMAT: tl.constexpr, CHANNEL_SCALES: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SLICES: tl.constexpr):
    pid_n, pid_k, r = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    expert = tl.load(ids_ptr + r).to(tl.int64)
    n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    k_start = pid_k.to(tl.int64) * K_PER_SPLIT
    x_row = x_ptr + r * stride_x
    if FORMAT <= 2:      # one element a value: the expert's [N, K] starts N * K elements on
        w_expert = w_ptr + expert * N * K
    else:                # GGUF blocks: N rows of ROW_BYTES bytes an expert
        w_expert = w_ptr + expert * N * ROW_BYTES
    if FORMAT == 6:
        acc = tl.zeros((BLOCK_N, 4), dtype=tl.float32)
    elif FORMAT == 7:
        acc = tl.zeros((BLOCK_N, 8, 16), dtype=tl.float32)
    elif FORMAT >= 3:
        acc = tl.zeros((BLOCK_N, BLOCK_K // 32, 32), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, tl.minimum(K_PER_SPLIT, K - k_start), BLOCK_K):     # the last slice may be short
        kb = k_start + k0
        if FORMAT == 6:
            acc += q4_k_gemv_block(w_expert, x_row, n, kb // 256, N, K, ROW_BYTES, BLOCK_N)
        elif FORMAT == 7:
            acc += q6_k_gemv_block(w_expert, x_row, n, kb // 256, N, K, ROW_BYTES, BLOCK_N)
        elif FORMAT >= 3:
            acc += block32_gemv(w_expert, x_row, n, kb, N, K, ROW_BYTES, FORMAT, BLOCK_N, BLOCK_K // 32)
        else:
            k = kb + tl.arange(0, BLOCK_K).to(tl.int64)
            if FORMAT == 1:
                w = int8_float(stored_values(w_expert, n[None, :], k[:, None], N, K))
            else:
                w = weight_tile(w_expert, n[None, :], k[:, None], N, K, FORMAT)
            xk = tl.load(x_row + k, mask=k < K, other=0.0).to(tl.float32)
            acc += tl.sum(w * xk[:, None], axis=0)
    if FORMAT == 6:
        acc = tl.sum(acc, axis=1)
    elif FORMAT >= 3:
        acc = tl.sum(tl.sum(acc, axis=2), axis=1)
    if CHANNEL_SCALES:
        acc = acc * tl.load(scales_ptr + expert * N + n, mask=n < N, other=0.0)
    store_summed(acc, out_ptr, partial_ptr, counters_ptr, r * N + n, n < N, R, N, SLICES)


@triton.jit
def _moe_linear_dot_kernel(x_ptr, w_ptr, scales_ptr, sorted_ids_ptr, order_ptr, out_ptr, R, N, K, stride_x,
                           ROW_BYTES, FORMAT: tl.constexpr, CHANNEL_SCALES: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
                           UPCAST: tl.constexpr):
    pid_n, pid_m = tl.program_id(0), tl.program_id(1)
    n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    slot = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)                 # positions in the sorted rows
    valid = slot < R
    rows = tl.load(order_ptr + slot, mask=valid, other=0).to(tl.int64)
    experts = tl.load(sorted_ids_ptr + slot, mask=valid, other=-1).to(tl.int64)
    first = tl.load(sorted_ids_ptr + pid_m * BLOCK_M).to(tl.int64)
    last = tl.max(experts, axis=0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for expert in range(first, last + 1):
        mine = valid & (experts == expert)
        if tl.sum(mine.to(tl.int32), axis=0) > 0:                  # an expert these rows skip is not read
            if FORMAT <= 2:
                w_expert = w_ptr + expert * N * K
            else:
                w_expert = w_ptr + expert * N * ROW_BYTES
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                k = k0 + tl.arange(0, BLOCK_K).to(tl.int64)
                if FORMAT == 6 or FORMAT == 7:
                    w = k_quant_tile(w_expert, n, k0 // 256, N, ROW_BYTES, FORMAT, BLOCK_N)
                elif FORMAT >= 3:
                    w = tl.trans(tl.reshape(block32_values(w_expert, n, k0, N, K, ROW_BYTES, FORMAT, BLOCK_N,
                                                           BLOCK_K // 32), (BLOCK_N, BLOCK_K)))
                elif FORMAT == 1:
                    w = int8_float(stored_values(w_expert, n[None, :], k[:, None], N, K))
                else:
                    w = weight_tile(w_expert, n[None, :], k[:, None], N, K, FORMAT)
                xk = tl.load(x_ptr + rows[:, None] * stride_x + k[None, :], mask=mine[:, None] & (k[None, :] < K),
                             other=0.0)
                part = part + dot(xk, w.to(x_ptr.dtype.element_ty), PRECISION, UPCAST)
            if CHANNEL_SCALES:
                part = part * tl.load(scales_ptr + expert * N + n, mask=n < N, other=0.0)[None, :]
            acc += part                                            # rows of other experts added zeros
    tl.store(out_ptr + rows[:, None] * N + n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=valid[:, None] & (n[None, :] < N))


#: Rows up to which moe_linear runs one GEMV per row; above, the grouped tl.dot kernel.
GEMV_MAX_ROWS = 16


def moe_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str | None,
               expert_ids: torch.Tensor) -> torch.Tensor:
    check_last_dim_contiguous("x", x)
    if x.dim() != 2 or weight.dim() != 3 or not weight.is_contiguous():
        raise InvalidArgumentError(f"x must be [R, K] and weight contiguous [E, N, ...]; got {tuple(x.shape)} "
                                   f"and {tuple(weight.shape)}")
    R, K = x.shape
    E, N = weight.shape[:2]
    if expert_ids.shape != (R,) or not expert_ids.is_contiguous():
        raise InvalidArgumentError(f"expert_ids must be contiguous [{R}], got {tuple(expert_ids.shape)}")
    fmt = "dense" if weight_format is None else weight_format
    if weight_format is None:
        if weight.shape[2] != K or weight.dtype != x.dtype:
            raise InvalidArgumentError(f"a float weight must be [E, N, {K}] {x.dtype}, got {weight.dtype} "
                                       f"{tuple(weight.shape)}")
    else:
        check_weight(weight.view(E * N, -1), None if scales is None else scales.reshape(E * N), weight_format, K)
    out = torch.empty((R, N), dtype=x.dtype, device=x.device)
    if R == 0 or N == 0:
        return out
    ROW_BYTES = row_bytes(fmt, K) if weight_format is not None else K
    if R > GEMV_MAX_ROWS:
        sorted_ids, order = torch.sort(expert_ids, stable=True)
        block_m = 16 if R <= 256 else 32 if R <= 2048 else 64
        block_n, block_k = (32, 256) if fmt in ("q4_k", "q6_k") else (64, 64)
        grid = (triton.cdiv(N, block_n), triton.cdiv(R, block_m))
        _moe_linear_dot_kernel[grid](
            x, weight, scales if scales is not None else weight, sorted_ids, order, out, R, N, K, x.stride(0),
            ROW_BYTES, FORMAT=CODES[fmt], CHANNEL_SCALES=fmt in CHANNEL_FORMATS, BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_K=block_k, PRECISION=dot_precision(x.dtype), UPCAST=upcast_dots(x.dtype, x.device), num_warps=4)
        return out
    return gemv(x, weight, scales, fmt, expert_ids, moe_plans.gemv_plan(R, N, K, fmt, x.device), out)


def gemv(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, fmt: str, expert_ids: torch.Tensor,
         p: Plan, out: torch.Tensor | None = None) -> torch.Tensor:
    """The few-rows path of :func:`moe_linear` on checked arguments (``fmt`` "dense" for a float
    weight) with plan ``p`` (:mod:`.moe_plans`; benchmarks/moe_bench.py sweeps plans through it)."""
    R, K = x.shape
    E, N = weight.shape[:2]
    if fmt in K_QUANTS and p.block_k != 256:
        raise InvalidArgumentError(f"{fmt}: a plan's block_k must be 256 (one super-block a step), got {p}")
    if out is None:
        out = torch.empty((R, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N, p.block_n), p.split, R)
    split_k = p.split > 1
    partial = torch.empty((p.split, R, N), dtype=torch.float32, device=x.device) if split_k else out
    counters = arrival_counters(x.device, grid[0] * grid[2]) if split_k else out
    _moe_linear_kernel[grid](
        x, weight, scales if scales is not None else weight, expert_ids, out, partial, counters, R, N, K, x.stride(0),
        row_bytes(fmt, K) if fmt != "dense" else K, p.k_per_split, FORMAT=CODES[fmt],
        CHANNEL_SCALES=fmt in CHANNEL_FORMATS, BLOCK_N=p.block_n, BLOCK_K=p.block_k, SLICES=p.split,
        num_warps=p.num_warps, **({} if p.num_stages is None else {"num_stages": p.num_stages}),
    )
    return out


#: Outputs a moe_combine program writes: 8 bfloat16 values a thread of 4 warps (16-byte loads).
COMBINE_BLOCK = 1024


@triton.jit
def _combine_kernel(rows_ptr, weights_ptr, out_ptr, N, stride, TOP_K: tl.constexpr, BLOCK: tl.constexpr,
                    USE_PDL: tl.constexpr = 0):
    pdl_wait(USE_PDL)
    t = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = n < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        w = tl.load(weights_ptr + t * TOP_K + j)
        acc += w * tl.load(rows_ptr + (t * TOP_K + j) * stride + n, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * N + n, acc.to(out_ptr.dtype.element_ty), mask=inside)


def moe_combine(expert_out: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    check_last_dim_contiguous("expert_out", expert_out)
    if weights.dim() != 2 or weights.dtype != torch.float32 or not weights.is_contiguous():
        raise InvalidArgumentError(f"weights must be contiguous [T, top_k] float32, got {weights.dtype} "
                                   f"{tuple(weights.shape)}")
    T, top_k = weights.shape
    if expert_out.dim() != 2 or expert_out.shape[0] != T * top_k or top_k < 1:
        raise InvalidArgumentError(f"expert_out must be [T * top_k, N] = [{T} * {top_k}, N], got "
                                   f"{tuple(expert_out.shape)}")
    N = expert_out.shape[1]
    out = torch.empty((T, N), dtype=expert_out.dtype, device=expert_out.device)
    if T and N:
        block = min(COMBINE_BLOCK, next_power_of_2(N))
        _combine_kernel[(T, triton.cdiv(N, block))](expert_out, weights, out, N, expert_out.stride(0), TOP_K=top_k,
                                                    BLOCK=block, num_warps=4, **pdl(expert_out.device))
    return out
