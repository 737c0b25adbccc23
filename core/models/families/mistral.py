"""Mistral: Llama with an optional sliding attention window."""
from __future__ import annotations

from ..family import ModelFamily


class MistralFamily(ModelFamily):
    name = "mistral"
    hf_architectures = ("MistralForCausalLM",)

    def sliding_window(self, config: dict) -> int | None:
        return config.get("sliding_window")


FAMILY = MistralFamily()
