"""Qwen2: Llama with q/k/v biases (always) and a sliding window when ``use_sliding_window`` says so."""
from __future__ import annotations

from ..family import ModelFamily


class Qwen2Family(ModelFamily):
    name = "qwen2"
    hf_architectures = ("Qwen2ForCausalLM",)
    gguf_architectures = ("qwen2",)

    def attention_biases(self, config: dict) -> tuple[bool, bool]:
        return True, False

    def sliding_window(self, config: dict) -> int | None:
        return config.get("sliding_window") if config.get("use_sliding_window") else None


FAMILY = Qwen2Family()
