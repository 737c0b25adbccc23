"""Attention over a paged KV cache: write the new K/V into their slots, gather each sequence's
context by its slot list, then scaled-dot-product attention (GQA aware)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .batch import StepBatch


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                    batch: StepBatch, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B, S, H, D], k/v [B, S, KV, D] (after RoPE); kv_cache [2 (K, V), slots, KV, D] of one layer;
    ``mask`` is :meth:`StepBatch.attention_mask`, made once per step.

    Returns [B, S, H*D]. Padding tokens are neither written nor attended.
    """
    B, S, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    k, v = k.reshape(B * S, num_kv_heads, head_dim), v.reshape(B * S, num_kv_heads, head_dim)
    if batch.N != B * S:    # padding to skip (prefill of unequal prompts)
        k, v = k.index_select(0, batch.token_index), v.index_select(0, batch.token_index)
    kv_cache[0].index_copy_(0, batch.write_slots, k)
    kv_cache[1].index_copy_(0, batch.write_slots, v)
    # Two gathers, not one kv_cache[:, read_slots]: that strided gather is 2x slower on cpu.
    keys = kv_cache[0][batch.read_slots].transpose(1, 2)     # [B, KV, L, D]
    values = kv_cache[1][batch.read_slots].transpose(1, 2)   # [B, KV, L, D]
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=mask, scale=scale,
        enable_gqa=num_heads != num_kv_heads,
    )                                                        # [B, H, S, D]
    return out.transpose(1, 2).reshape(B, S, num_heads * head_dim)
