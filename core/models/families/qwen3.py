"""Qwen3 (dense): Llama's layer with an RMS norm over each query and key head (weights ``q_norm`` and
``k_norm``, ``[head_dim]``, shared by the heads) between the projections and rotary; no q/k/v bias
unless ``attention_bias`` says so (then o_proj has one too). GGUF: llama.cpp's ``qwen3`` architecture
(``attn_q_norm``/``attn_k_norm``; q/k rows not permuted)."""
from __future__ import annotations

import torch

from ..batch import StepBatch
from ..family import LLAMA_GGUF_LAYER_NAMES, ModelFamily
from ..llama import LlamaRank
from ...model_config import ModelLoadError

QK_NORM_GGUF_NAMES = {**LLAMA_GGUF_LAYER_NAMES, "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}


class Qwen3Rank(LlamaRank):
    """LlamaRank with the per-head q/k norms."""

    def __init__(self, config, shard, weights, *args, **kwargs):
        super().__init__(config, shard, weights, *args, **kwargs)
        for i, w in zip(self.stage.layers, self.layers):
            p = f"model.layers.{i}.self_attn."
            w["q_norm"], w["k_norm"] = weights[p + "q_norm.weight"], weights[p + "k_norm.weight"]

    def rotary_write_kv(self, i: int, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        batch: StepBatch) -> torch.Tensor:
        w, (k_pages, v_pages) = self.layers[i], self.kv_pages[i]
        # one fused kernel where the backend offers it, else rms_norm of q and of k, then rotary_write_kv
        return self.kernels.qk_norm_rotary_write_kv(batch.positions, q, key, value, k_pages, v_pages,
                                                    batch.slot_mapping, self.cos_sin_cache, w["q_norm"],
                                                    w["k_norm"], self.config.rms_norm_eps)


class Qwen3Family(ModelFamily):
    name = "qwen3"
    hf_architectures = ("Qwen3ForCausalLM",)
    gguf_architectures = ("qwen3",)
    gguf_layer_names = QK_NORM_GGUF_NAMES
    rank_class = Qwen3Rank

    def sliding_window(self, config: dict) -> int | None:
        if config.get("use_sliding_window"):
            raise ModelLoadError("qwen3 with use_sliding_window=true (a window on some layers) is not supported; "
                                 "set it to false to run every layer with full attention")
        return None

    def layer_tensor_names(self, config, i: int) -> list[str]:
        names = super().layer_tensor_names(config, i)
        return names + [f"model.layers.{i}.self_attn.{n}_norm.weight" for n in "qk"]

    def full_shape(self, name: str, config) -> tuple[int, ...]:
        if name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
            return (config.head_dim,)
        return super().full_shape(name, config)


FAMILY = Qwen3Family()
