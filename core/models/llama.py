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
    ``kv_layers[i]`` is layer i's (k_cache, v_cache), each [slots, local KV heads, head_dim];
    ``all_reduce`` sums a tensor over ranks in place (None at tp=1)."""

    def __init__(self, config, shard: RankShard, weights: dict[str, torch.Tensor],
                 kv_layers: list[tuple[torch.Tensor, torch.Tensor]], inv_freq: torch.Tensor,
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
        }
        return {key: weights.get(p + name) for key, name in names.items()}

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        """Logits [B, vocab] of each sequence's last real token (the model's dtype)."""
        eps = self.config.rms_norm_eps
        x = F.embedding(batch.input_ids, self.embed)                       # [B, S, hidden]
        cos, sin = cos_sin(batch.positions, self.inv_freq, x.dtype)         # [B, S, D]
        for w, (k_cache, v_cache) in zip(self.layers, self.kv_layers):
            x = x + self._attention(w, rms_norm(x, w["attn_norm"], eps), cos, sin, k_cache, v_cache, batch)
            x = x + self._reduced(swiglu_mlp(rms_norm(x, w["mlp_norm"], eps), w["gate"], w["up"], w["down"]))
        x = rms_norm(x, self.norm, eps)
        last = x[torch.arange(x.shape[0], device=x.device), batch.last_index]  # [B, hidden]
        return F.linear(last, self.lm_head)

    def _attention(self, w, x, cos, sin, k_cache, v_cache, batch: StepBatch) -> torch.Tensor:
        B, S, _ = x.shape
        d = self.shard.head_dim
        q = F.linear(x, w["q"], w["q_bias"]).view(B, S, self.shard.num_heads, d)
        k = F.linear(x, w["k"], w["k_bias"]).view(B, S, self.shard.num_kv_heads, d)
        v = F.linear(x, w["v"], w["v_bias"]).view(B, S, self.shard.num_kv_heads, d)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = paged_attention(q, k, v, k_cache, v_cache, batch, self.scale)  # [B, S, local H*D]
        out = self._reduced(F.linear(out, w["o"]))
        return out if w["o_bias"] is None else out + w["o_bias"]

    def _reduced(self, partial: torch.Tensor) -> torch.Tensor:
        if self.all_reduce is not None:
            self.all_reduce(partial)
        return partial
