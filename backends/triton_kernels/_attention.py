"""The inner loop of the paged attention kernels (decode and prefill): one tile of keys and values,
read through a block table, folded into an online softmax in float32."""
from __future__ import annotations

from ._common import dot, tl, triton


@triton.jit
def attend_tile(q, m_i, l_i, acc, start, hi, q_pos, window, qk_scale,
                k_cache_ptr, v_cache_ptr, table_ptr, kv_head, stride_page, stride_slot, stride_kvh,
                D: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """Fold the keys at positions ``start .. start + BLOCK_N - 1`` below ``hi`` (of KV head
    ``kv_head``, pages listed at ``table_ptr``) into the running maximum ``m_i`` [M], sum ``l_i``
    [M] and unnormalised output ``acc`` [M, D] of the query rows ``q`` [M, D]; return the three.
    Scores are in log2 units (``qk_scale`` includes log2(e)). CAUSAL: row ``i`` sees only the keys
    at or before ``q_pos[i]`` and, when ``window > 0``, after ``q_pos[i] - window``; otherwise every
    key below ``hi`` (the caller bounds the walk). Keys at or past ``hi`` are never read."""
    n = start + tl.arange(0, BLOCK_N)
    in_seq = n < hi
    page = tl.load(table_ptr + n // BLOCK_SIZE, mask=in_seq, other=0).to(tl.int64)
    rows = page * stride_page + (n % BLOCK_SIZE) * stride_slot + kv_head * stride_kvh
    d = tl.arange(0, D)
    k = tl.load(k_cache_ptr + rows[:, None] + d[None, :], mask=in_seq[:, None], other=0.0)
    s = dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale                # [M, BLOCK_N]
    visible = in_seq[None, :]
    if CAUSAL:
        visible = visible & (n[None, :] <= q_pos[:, None])
        visible = visible & ((window <= 0) | (n[None, :] > q_pos[:, None] - window))
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)                 # rows with nothing visible yet
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_cache_ptr + rows[:, None] + d[None, :], mask=in_seq[:, None], other=0.0)
    acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, PRECISION, UPCAST)
    return m_new, l_i, acc
