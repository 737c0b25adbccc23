"""rotary_embedding and the fused rotary_write_kv and qk_norm_rotary_write_kv (see
``anydev.plugin_api.kernels``): one program per token rotates all its query and key heads in place;
fused, the same program also writes the rotated keys and the values into the token's slot of the pages
(one launch instead of two), and first RMS-normalises each head (Qwen3's q/k norms: one launch instead
of three, and no copies of the strided q and k views into contiguous rows). cos/sin are
rounded to the activations' dtype as HF does; the rotation itself is computed in float32 and rounded
once; the cache receives exactly the rounded keys left in ``k``."""
from __future__ import annotations

import torch

from anydev.plugin_api.errors import InvalidArgumentError

from ._common import check_cache, check_last_dim_contiguous, next_power_of_2, pdl, pdl_wait, tl, triton


@triton.jit
def _rotate(x_ptr, stride_t, stride_h, t, heads, cos, sin, cache_ptr, slot, norm_ptr, eps,
            HEADS_PAD: tl.constexpr, HALF: tl.constexpr, WRITE_CACHE: tl.constexpr, NORM: tl.constexpr):
    """Rotate ``heads`` heads of token ``t`` in place; with WRITE_CACHE also store them at ``slot``
    of the contiguous cache (rows of heads x 2*HALF elements) when the slot is not negative. With
    NORM each head is first RMS-normalised with the weight at ``norm_ptr``, rounded as the rms_norm
    kernel rounds (the statistics over the whole head, as that kernel sums a row)."""
    h = tl.arange(0, HEADS_PAD)[:, None]
    d = tl.arange(0, HALF)[None, :]
    mask = h < heads
    first = x_ptr + t * stride_t + h * stride_h + d
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    if NORM:
        row = tl.load(x_ptr + t * stride_t + h * stride_h + tl.arange(0, 2 * HALF)[None, :], mask=mask,
                      other=0.0).to(tl.float32)
        rstd = (1.0 / tl.sqrt(tl.sum(row * row, axis=1) / (2 * HALF) + eps))[:, None]
        w1 = tl.load(norm_ptr + d).to(tl.float32)
        w2 = tl.load(norm_ptr + HALF + d).to(tl.float32)
        x1 = (w1 * (x1 * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(x_ptr.dtype.element_ty).to(tl.float32)
        x2 = (w2 * (x2 * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(x_ptr.dtype.element_ty).to(tl.float32)
    c = cos.to(x_ptr.dtype.element_ty).to(tl.float32)
    s = sin.to(x_ptr.dtype.element_ty).to(tl.float32)
    y1 = (x1 * c - x2 * s).to(x_ptr.dtype.element_ty)
    y2 = (x2 * c + x1 * s).to(x_ptr.dtype.element_ty)
    tl.store(first, y1, mask=mask)
    tl.store(first + HALF, y2, mask=mask)
    if WRITE_CACHE:
        _store_row(cache_ptr, slot, heads, h, d, y1, y2, mask, HALF)


@triton.jit
def _store_row(cache_ptr, slot, heads, h, d, y1, y2, mask, HALF: tl.constexpr):
    """Token's heads (halves ``y1``, ``y2``) into ``slot`` of a contiguous cache; skipped for slot < 0."""
    keep = mask & ((h * 0 + slot) >= 0)          # the slot test broadcast to the block first
    row = cache_ptr + slot * (heads * 2 * HALF) + h * (2 * HALF) + d
    tl.store(row, y1.to(cache_ptr.dtype.element_ty), mask=keep)
    tl.store(row + HALF, y2.to(cache_ptr.dtype.element_ty), mask=keep)


@triton.jit
def _rotary_kernel(positions_ptr, q_ptr, k_ptr, v_ptr, cos_sin_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                   q_norm_ptr, k_norm_ptr, eps, num_q_heads, num_k_heads,
                   stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_cos_sin,
                   Q_HEADS_PAD: tl.constexpr, K_HEADS_PAD: tl.constexpr, HALF: tl.constexpr,
                   WRITE_KV: tl.constexpr, NORM: tl.constexpr, USE_PDL: tl.constexpr = 0):
    pdl_wait(USE_PDL)
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + t)
    d = tl.arange(0, HALF)[None, :]
    cos = tl.load(cos_sin_ptr + pos * stride_cos_sin + d)
    sin = tl.load(cos_sin_ptr + pos * stride_cos_sin + HALF + d)
    slot = -1
    if WRITE_KV:
        slot = tl.load(slot_ptr + t)                     # int64; negative: padding, nothing written
    _rotate(q_ptr, stride_qt, stride_qh, t, num_q_heads, cos, sin, k_cache_ptr, slot, q_norm_ptr, eps,
            Q_HEADS_PAD, HALF, False, NORM)
    _rotate(k_ptr, stride_kt, stride_kh, t, num_k_heads, cos, sin, k_cache_ptr, slot, k_norm_ptr, eps,
            K_HEADS_PAD, HALF, WRITE_KV, NORM)
    if WRITE_KV:
        h = tl.arange(0, K_HEADS_PAD)[:, None]
        mask = h < num_k_heads
        first = v_ptr + t * stride_vt + h * stride_vh + d
        _store_row(v_cache_ptr, slot, num_k_heads, h, d, tl.load(first, mask=mask), tl.load(first + HALF, mask=mask),
                   mask, HALF)


def _launch(positions, q, k, v, cos_sin_cache, k_cache, v_cache, slot_mapping, q_weight=None, k_weight=None,
            eps=0.0):
    check_last_dim_contiguous("q", q)
    check_last_dim_contiguous("k", k)
    check_last_dim_contiguous("cos_sin_cache", cos_sin_cache)
    write_kv = v is not None
    if write_kv:
        check_last_dim_contiguous("value", v)
        check_cache(k_cache, v_cache)
    T, H, D = q.shape
    KV = k.shape[1]
    if write_kv and (tuple(k_cache.shape[2:]) != (KV, D) or v.shape != k.shape):
        raise InvalidArgumentError(f"rotary_write_kv: key {tuple(k.shape)}, value {tuple(v.shape)} and pages "
                                   f"{tuple(k_cache.shape)} disagree on [KV heads, head_dim]")
    norm = q_weight is not None
    if norm and not (q_weight.shape == k_weight.shape == (D,) and q_weight.dtype == k_weight.dtype == q.dtype
                     and q_weight.is_contiguous() and k_weight.is_contiguous()):
        raise InvalidArgumentError(f"qk_norm_rotary_write_kv: q_weight and k_weight must be contiguous [{D}] {q.dtype}, "
                                   f"got {q_weight.dtype} {tuple(q_weight.shape)} and {k_weight.dtype} "
                                   f"{tuple(k_weight.shape)}")
    if T == 0:
        return
    _rotary_kernel[(T,)](
        positions, q, k, v if write_kv else k, cos_sin_cache,
        k_cache if write_kv else k, v_cache if write_kv else k, slot_mapping if write_kv else positions,
        q_weight if norm else q, k_weight if norm else k, float(eps), H, KV,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        (v if write_kv else k).stride(0), (v if write_kv else k).stride(1), cos_sin_cache.stride(0),
        Q_HEADS_PAD=next_power_of_2(H), K_HEADS_PAD=next_power_of_2(KV), HALF=D // 2, WRITE_KV=write_kv,
        NORM=norm, num_warps=4 if H * D >= 2048 else 2, **pdl(q.device),
    )


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                     cos_sin_cache: torch.Tensor) -> None:
    _launch(positions, q, k, None, cos_sin_cache, None, None, None)


def rotary_write_kv(positions: torch.Tensor, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                    cos_sin_cache: torch.Tensor) -> None:
    _launch(positions, q, key, value, cos_sin_cache, k_cache, v_cache, slot_mapping)


def qk_norm_rotary_write_kv(positions: torch.Tensor, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                            cos_sin_cache: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                            eps: float) -> torch.Tensor:
    _launch(positions, q, key, value, cos_sin_cache, k_cache, v_cache, slot_mapping, q_weight, k_weight, eps)
    return q
