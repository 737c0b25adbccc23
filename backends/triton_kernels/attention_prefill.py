"""paged_prefill_attention (see ``anydev.plugin_api.kernels.paged_prefill_attention``): causal flash
attention over packed variable-length sequences, reading keys and values through the block tables
(so a cached prefix and the new tokens are read alike), no padding and no mask tensor.

One program per (tile of BLOCK_M queries of one sequence, query head); it walks the key positions
that tile can see (the causal diagonal and the sliding window bound the walk), tile by tile, with an
online softmax in float32 (:func:`._attention.attend_tile`, shared with decode).

The grid is sized from host-known shapes only, so a call never reads a tensor back (a step's layers
run between piecewise graphs, and a host read there stalls the device once per layer). As in vLLM's
unified Triton attention, sequence ``b``'s tiles are numbered from ``cu_seqlens_q[b] // BLOCK_M + b``
on, which leaves room for ``ceil(q_len_b / BLOCK_M)`` of them; ``T // BLOCK_M + B`` tiles cover every
sequence, and a program finds its sequence by a binary search over ``cu_seqlens_q``. A program past
its sequence's queries does nothing.
"""
from __future__ import annotations

import torch

from ._attention import attend_tile
from ._common import LOG2E, check_cache, check_last_dim_contiguous, dot_precision, tl, triton, upcast_dots


@triton.jit
def _sequence_of(cu_ptr, block, num_seqs, BLOCK_M: tl.constexpr):
    """The last sequence ``b`` whose first tile ``cu_seqlens_q[b] // BLOCK_M + b`` is at or before
    ``block`` (a binary search; those first tiles increase with ``b``)."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(cu_ptr + mid) // BLOCK_M + mid <= block:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


# The batch's sequence count and block-table width change from step to step: not specialized (Triton
# would compile another kernel when one turns 1 or a multiple of 16).
@triton.jit(do_not_specialize=["num_seqs", "stride_tb"])
def _prefill_kernel(q_ptr, k_cache_ptr, v_cache_ptr, cu_ptr, lens_ptr, tables_ptr, out_ptr,
                    qk_scale, window,
                    stride_qt, stride_qh, stride_ot, stride_oh, stride_tb,
                    stride_page, stride_slot, stride_kvh,
                    num_seqs,
                    GROUP: tl.constexpr, D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                    UPCAST: tl.constexpr):
    block = tl.program_id(0)
    head = tl.program_id(1)
    b = _sequence_of(cu_ptr, block, num_seqs, BLOCK_M).to(tl.int64)
    first = tl.load(cu_ptr + b)
    tile = block - (first // BLOCK_M + b)             # this program's tile within its sequence
    q_len = tl.load(cu_ptr + b + 1) - first
    seq_len = tl.load(lens_ptr + b)
    kv_head = head // GROUP

    m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    q_valid = m < q_len
    q_pos = seq_len - q_len + m                       # each query's position in its sequence
    d = tl.arange(0, D)
    rows = (first + m).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head * stride_qh + d[None, :], mask=q_valid[:, None], other=0.0)

    # Keys from the first one the tile's first query sees to the tile's last query; none for a tile
    # past this sequence's queries.
    hi = tl.minimum(seq_len, seq_len - q_len + (tile + 1) * BLOCK_M)
    hi = tl.where(tile * BLOCK_M < q_len, hi, 0)
    lo = tl.where(window > 0, tl.maximum(seq_len - q_len + tile * BLOCK_M - window + 1, 0), 0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        m_i, l_i, acc = attend_tile(q, m_i, l_i, acc, start, hi, q_pos, window, qk_scale,
                                    k_cache_ptr, v_cache_ptr, tables_ptr + b * stride_tb, kv_head,
                                    stride_page, stride_slot, stride_kvh,
                                    D, BLOCK_SIZE, BLOCK_N, True, PRECISION, UPCAST)

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=q_valid[:, None])


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                            block_tables: torch.Tensor, scale: float,
                            sliding_window: int | None = None) -> torch.Tensor:
    check_cache(k_cache, v_cache)
    check_last_dim_contiguous("q", q)
    T, H, D = q.shape
    _, block_size, KV, _ = k_cache.shape
    B = seq_lens.shape[0]
    out = torch.empty_like(q)
    if T == 0 or B == 0:
        return out
    block_m = 64 if q.dtype != torch.float32 else 32
    block_n = 64 if D <= 64 else 32
    _prefill_kernel[(T // block_m + B, H)](
        q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, out,
        float(scale) * LOG2E, int(sliding_window or 0),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), B,
        GROUP=H // KV, D=D, BLOCK_SIZE=block_size, BLOCK_M=block_m, BLOCK_N=block_n,
        PRECISION=dot_precision(q.dtype), UPCAST=upcast_dots(q.dtype, q.device), num_warps=4, num_stages=2,
    )
    return out
