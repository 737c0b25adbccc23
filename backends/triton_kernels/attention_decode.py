"""paged_decode_attention (see ``anydev.plugin_api.kernels.paged_decode_attention``): flash-decoding
over the pages, no gather, no mask tensor.

One program per (sequence, KV head, split of the context): it computes all the query heads of its KV
head's group at once (one ``tl.dot`` per tile of keys: GQA reads each key once), reading keys and
values tile by tile through the block table, only up to the sequence's length, with an online
softmax in float32. Long contexts are split over several programs (split-K) when the batch alone does
not fill the device; a second small kernel then merges the splits by their log-sum-exp. The number of
splits depends only on shapes (never on ``seq_lens`` values), so a call can be captured in a graph.
"""
from __future__ import annotations

import torch

from ._common import (LOG2E, check_cache, check_last_dim_contiguous, dot, dot_precision, programs_to_fill,
                      next_power_of_2, tl, triton, upcast_dots)

BLOCK_N = 64               # keys per tile (any block_size: each key row is found through the table)
MIN_SPLIT_TOKENS = 256     # a split covers at least this many key positions


@triton.jit
def _decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, tables_ptr, lens_ptr, out_ptr, part_out_ptr, part_lse_ptr,
                   qk_scale, window, tokens_per_split,
                   stride_qb, stride_qh, stride_tb, stride_ob, stride_oh,
                   stride_page, stride_slot, stride_kvh,
                   stride_pb, stride_ph, stride_ps,
                   GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, PRECISION: tl.constexpr,
                   UPCAST: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    lo = split * tokens_per_split
    hi = tl.minimum(seq_len, lo + tokens_per_split)
    lo = tl.where(window > 0, tl.maximum(lo, seq_len - window), lo)

    g = tl.arange(0, GROUP_PAD)
    heads = kv_head * GROUP + g
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=(g < GROUP)[:, None], other=0.0)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < hi
        page = tl.load(tables_ptr + b * stride_tb + n // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
        rows = page * stride_page + (n % BLOCK_SIZE) * stride_slot + kv_head * stride_kvh
        k = tl.load(k_cache_ptr + rows[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        s = dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale          # [GROUP_PAD, BLOCK_N], log2 units
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_cache_ptr + rows[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, PRECISION, UPCAST)
        m_i = m_new

    has_keys = l_i > 0.0
    out = tl.where(has_keys[:, None], acc / tl.where(has_keys, l_i, 1.0)[:, None], 0.0)
    head_mask = (g < GROUP)[:, None]
    if SPLIT:
        base = b * stride_pb + heads * stride_ph + split * stride_ps
        tl.store(part_out_ptr + base[:, None] * D + d[None, :], out, mask=head_mask)
        lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + base, lse, mask=g < GROUP)
    else:
        tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=head_mask)


@triton.jit
def _merge_kernel(part_out_ptr, part_lse_ptr, out_ptr, num_splits,
                  stride_pb, stride_ph, stride_ob, stride_oh,
                  D: tl.constexpr, SPLITS_PAD: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, D)
    base = b * stride_pb + h * stride_ph + s
    lse = tl.load(part_lse_ptr + base, mask=s < num_splits, other=float("-inf"))
    m = tl.max(lse, axis=0)
    m = tl.where(m == float("-inf"), 0.0, m)       # no keys at all (seq_len 0): every weight is 0
    w = tl.exp2(lse - m)
    total = tl.sum(w, axis=0)
    parts = tl.load(part_out_ptr + base[:, None] * D + d[None, :], mask=(s < num_splits)[:, None], other=0.0)
    out = tl.sum(parts * w[:, None], axis=0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + d, out.to(out_ptr.dtype.element_ty))


def num_splits(batch: int, kv_heads: int, max_tokens: int, device: torch.device) -> int:
    """How many programs share one sequence's context: enough to fill the device when batch x KV
    heads does not, each split covering at least MIN_SPLIT_TOKENS positions."""
    wanted = triton.cdiv(programs_to_fill(device), max(batch * kv_heads, 1))
    return max(1, min(wanted, triton.cdiv(max_tokens, MIN_SPLIT_TOKENS)))


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           sliding_window: int | None = None) -> torch.Tensor:
    check_cache(k_cache, v_cache)
    check_last_dim_contiguous("q", q)
    B, H, D = q.shape
    _, block_size, KV, _ = k_cache.shape
    out = torch.empty_like(q)
    if B == 0:
        return out
    group = H // KV
    max_tokens = block_tables.shape[1] * block_size
    splits = num_splits(B, KV, max_tokens, q.device)
    tokens_per_split = triton.cdiv(triton.cdiv(max_tokens, splits), BLOCK_N) * BLOCK_N
    if splits > 1:
        part_out = torch.empty((B, H, splits, D), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((B, H, splits), dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = out                   # unused
    _decode_kernel[(B, KV, splits)](
        q, k_cache, v_cache, block_tables, seq_lens, out, part_out, part_lse,
        float(scale) * LOG2E, int(sliding_window or 0), tokens_per_split,
        q.stride(0), q.stride(1), block_tables.stride(0), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        H * splits, splits, 1,
        GROUP=group, GROUP_PAD=max(16, next_power_of_2(group)), D=D, BLOCK_SIZE=block_size,
        BLOCK_N=BLOCK_N, SPLIT=splits > 1, PRECISION=dot_precision(q.dtype), UPCAST=upcast_dots(q.dtype, q.device),
        num_warps=4, num_stages=2,
    )
    if splits > 1:
        _merge_kernel[(B, H)](
            part_out, part_lse, out, splits, H * splits, splits, out.stride(0), out.stride(1),
            D=D, SPLITS_PAD=next_power_of_2(splits), num_warps=2 if D <= 64 else 4,
        )
    return out
