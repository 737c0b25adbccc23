"""rotary_embedding (see ``anydev.plugin_api.kernels.rotary_embedding``): one program per token rotates
all its query and key heads in place, one launch for both. cos/sin are rounded to the activations'
dtype as HF does; the rotation itself is computed in float32 and rounded once."""
from __future__ import annotations

import torch

from ._common import check_last_dim_contiguous, next_power_of_2, tl, triton


@triton.jit
def _rotate(x_ptr, stride_t, stride_h, t, heads, cos, sin, HEADS_PAD: tl.constexpr, HALF: tl.constexpr):
    h = tl.arange(0, HEADS_PAD)[:, None]
    d = tl.arange(0, HALF)[None, :]
    mask = h < heads
    first = x_ptr + t * stride_t + h * stride_h + d
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    c = cos.to(x_ptr.dtype.element_ty).to(tl.float32)
    s = sin.to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(first, (x1 * c - x2 * s).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(first + HALF, (x2 * c + x1 * s).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(positions_ptr, q_ptr, k_ptr, cache_ptr, num_q_heads, num_k_heads,
                   stride_qt, stride_qh, stride_kt, stride_kh, stride_cache,
                   Q_HEADS_PAD: tl.constexpr, K_HEADS_PAD: tl.constexpr, HALF: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + t)
    d = tl.arange(0, HALF)[None, :]
    cos = tl.load(cache_ptr + pos * stride_cache + d)
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + d)
    _rotate(q_ptr, stride_qt, stride_qh, t, num_q_heads, cos, sin, Q_HEADS_PAD, HALF)
    _rotate(k_ptr, stride_kt, stride_kh, t, num_k_heads, cos, sin, K_HEADS_PAD, HALF)


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                     cos_sin_cache: torch.Tensor) -> None:
    check_last_dim_contiguous("q", q)
    check_last_dim_contiguous("k", k)
    check_last_dim_contiguous("cos_sin_cache", cos_sin_cache)
    T, H, D = q.shape
    if T == 0:
        return
    _rotary_kernel[(T,)](
        positions, q, k, cos_sin_cache, H, k.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos_sin_cache.stride(0),
        Q_HEADS_PAD=next_power_of_2(H), K_HEADS_PAD=next_power_of_2(k.shape[1]), HALF=D // 2,
        num_warps=4 if H * D >= 2048 else 2,
    )
