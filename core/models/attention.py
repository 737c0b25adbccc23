"""Attention over a paged KV cache: write the new K/V into their slots, gather each sequence's
context by its block table, then scaled-dot-product attention (GQA aware)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .batch import StepBatch


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, batch: StepBatch, scale: float) -> torch.Tensor:
    """q [B, S, H, D], k/v [B, S, KV, D] (after RoPE); k_cache/v_cache [slots, KV, D] of one layer.

    Returns [B, S, H*D]. Padding tokens are neither written nor attended.
    """
    B, S, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    k_cache.index_copy_(0, batch.write_slots, k.reshape(B * S, num_kv_heads, head_dim).index_select(0, batch.token_index))
    v_cache.index_copy_(0, batch.write_slots, v.reshape(B * S, num_kv_heads, head_dim).index_select(0, batch.token_index))
    keys = k_cache[batch.read_slots].transpose(1, 2)        # [B, KV, L, D]
    values = v_cache[batch.read_slots].transpose(1, 2)      # [B, KV, L, D]
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=batch.mask, scale=scale,
        enable_gqa=num_heads != num_kv_heads,
    )                                                        # [B, H, S, D]
    return out.transpose(1, 2).reshape(B, S, num_heads * head_dim)
