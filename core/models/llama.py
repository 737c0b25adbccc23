"""The Llama-family decoder (llama, mistral, qwen2) on one tensor-parallel rank.

HF transformers' math, op for op, on the rank's weight shard (see :mod:`.sharding`); the only TP
knowledge here is the all-reduce after the row-parallel o_proj and down_proj.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .attention import paged_attention
from .batch import StepBatch
from .layers import rms_norm, swiglu_mlp
from .rope import apply_rope, cos_sin
from .sharding import RankShard


class LlamaRank:
    """Forward pass of one rank. ``weights`` maps HF names to this rank's device tensors;
    ``kv_layers[i]`` is layer i's K and V pages, [2, slots, local KV heads, head_dim];
    ``all_reduce`` sums a tensor over ranks in place (None at tp=1)."""

    def __init__(self, config, shard: RankShard, weights: dict[str, torch.Tensor],
                 kv_layers: list[torch.Tensor], inv_freq: torch.Tensor,
                 all_reduce: Callable[[torch.Tensor], None] | None):
        self.config = config
        self.shard = shard
        self.kv_layers = kv_layers
        self.inv_freq = inv_freq
        self.all_reduce = all_reduce
        self.scale = config.head_dim ** -0.5
        self.embed = weights["model.embed_tokens.weight"]
        self.norm = weights["model.norm.weight"]
        self.lm_head = self.embed if config.tie_word_embeddings else weights["lm_head.weight"]
        self.layers = [self._layer_weights(weights, i) for i in range(config.num_hidden_layers)]

    @staticmethod
    def _layer_weights(weights, i: int) -> dict[str, torch.Tensor | None]:
        p = f"model.layers.{i}."
        names = {
            "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
            "o": "self_attn.o_proj.weight", "o_bias": "self_attn.o_proj.bias", "q_bias": "self_attn.q_proj.bias", "k_bias": "self_attn.k_proj.bias",
            "v_bias": "self_attn.v_proj.bias", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
            "down": "mlp.down_proj.weight", "attn_norm": "input_layernorm.weight",
            "mlp_norm": "post_attention_layernorm.weight",
            # fused views (see .fusion), present when the parts are back to back in memory
            "qkv": "self_attn.qkv_proj.weight", "qkv_bias": "self_attn.qkv_proj.bias", "gate_up": "mlp.gate_up_proj.weight",
        }
        w = {key: weights.get(p + name) for key, name in names.items()}
        if w["q_bias"] is not None and w["qkv_bias"] is None:
            w["qkv"] = None    # fused weight but unfused bias: run the parts
        return w

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        """Logits [B, vocab] of each sequence's last real token (the model's dtype)."""
        eps = self.config.rms_norm_eps
        x = F.embedding(batch.input_ids, self.embed)                       # [B, S, hidden]
        cos, sin = cos_sin(batch.positions, self.inv_freq, x.dtype)         # [B, S, 1, D] each
        mask = batch.attention_mask()                                       # [B, 1, S, L]
        for w, kv_cache in zip(self.layers, self.kv_layers):
            x = x + self._attention(w, rms_norm(x, w["attn_norm"], eps), cos, sin, kv_cache, batch, mask)
            x = x + self._reduced(self._mlp(w, rms_norm(x, w["mlp_norm"], eps)))
        if batch.is_decode:
            last = x[:, 0]                                                  # [B, hidden]
        else:
            last = x[torch.arange(x.shape[0], device=x.device), batch.last_index]
        return F.linear(rms_norm(last, self.norm, eps), self.lm_head)     # the norm is per token

    def _attention(self, w, x, cos, sin, kv_cache, batch: StepBatch, mask) -> torch.Tensor:
        q, k, v = self._qkv_roped(w, x, cos, sin)
        out = paged_attention(q, k, v, kv_cache, batch, mask, self.scale)  # [B, S, local H*D]
        out = self._reduced(F.linear(out, w["o"]))
        return out if w["o_bias"] is None else out + w["o_bias"]

    def _qkv_roped(self, w, x, cos, sin):
        """q [B, S, H, D] and k [B, S, KV, D] after RoPE, v [B, S, KV, D]."""
        B, S, _ = x.shape
        d, heads, kv_heads = self.shard.head_dim, self.shard.num_heads, self.shard.num_kv_heads
        if w["qkv"] is None:
            q = F.linear(x, w["q"], w["q_bias"]).view(B, S, heads, d)
            k = F.linear(x, w["k"], w["k_bias"]).view(B, S, kv_heads, d)
            v = F.linear(x, w["v"], w["v_bias"]).view(B, S, kv_heads, d)
            return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v
        qkv = F.linear(x, w["qkv"], w["qkv_bias"])                          # [B, S, (H + 2 KV) D]
        qk = apply_rope(qkv[..., :(heads + kv_heads) * d].view(B, S, heads + kv_heads, d), cos, sin)
        q, k = qk.split((heads, kv_heads), dim=2)
        return q, k, qkv[..., (heads + kv_heads) * d:].view(B, S, kv_heads, d)

    @staticmethod
    def _mlp(w, x) -> torch.Tensor:
        """down(silu(gate(x)) * up(x)); on a TP rank the result is a partial sum to all-reduce."""
        if w["gate_up"] is None:
            return swiglu_mlp(x, w["gate"], w["up"], w["down"])
        gate, up = F.linear(x, w["gate_up"]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, w["down"])

    def _reduced(self, partial: torch.Tensor) -> torch.Tensor:
        if self.all_reduce is not None:
            self.all_reduce(partial)
        return partial
