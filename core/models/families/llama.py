"""Llama (and every checkpoint that says ``LlamaForCausalLM``): the registry's base family."""
from __future__ import annotations

from ..family import ModelFamily


class LlamaFamily(ModelFamily):
    name = "llama"
    hf_architectures = ("LlamaForCausalLM",)
    gguf_architectures = ("llama",)     # mistral GGUFs say "llama" too


FAMILY = LlamaFamily()
