"""write_kv: the K/V of new tokens into their pages (see ``anydev.plugin_api.kernels.write_kv``)."""
from __future__ import annotations

import torch

from ._common import check_cache, check_last_dim_contiguous, next_power_of_2, tl, triton


@triton.jit
def _write_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                     stride_kt, stride_kh, stride_vt, stride_vh,
                     KV: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t)                   # int64; negative: padding, nothing written
    offs = tl.arange(0, BLOCK)
    head, d = offs // D, offs % D
    mask = (offs < KV * D) & ((offs * 0 + slot) >= 0)   # the slot test broadcast to the block first
    dst = slot * (KV * D) + offs                   # the cache is contiguous: a slot is KV*D elements
    k = tl.load(key_ptr + t * stride_kt + head * stride_kh + d, mask=mask)
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    v = tl.load(value_ptr + t * stride_vt + head * stride_vh + d, mask=mask)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    check_cache(k_cache, v_cache)
    check_last_dim_contiguous("key", key)
    check_last_dim_contiguous("value", value)
    T, KV, D = key.shape
    if T == 0:
        return
    block = next_power_of_2(KV * D)
    _write_kv_kernel[(T,)](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        KV=KV, D=D, BLOCK=block, num_warps=4 if block >= 1024 else 2,
    )
