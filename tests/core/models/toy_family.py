"""A toy model family, the whole of it in one file: Llama with its token embeddings multiplied by
``embedding_multiplier`` (read from config.json), as docs/models.md shows. Registering it is one line:
``register_family(FAMILY)`` (in a package of your own: an ``anydev.models`` entry point)."""
from __future__ import annotations

from dataclasses import dataclass

from anydev.core.model_config import ModelConfig, positive_number
from anydev.core.models.family import ModelFamily
from anydev.core.models.llama import LlamaRank


@dataclass
class ToyConfig(ModelConfig):
    embedding_multiplier: float = 1.0


class ToyRank(LlamaRank):
    def embed_tokens(self, batch):
        return super().embed_tokens(batch) * self.config.embedding_multiplier


class ToyFamily(ModelFamily):
    name = "toy"
    hf_architectures = ("ToyForCausalLM",)
    rank_class = ToyRank
    config_class = ToyConfig

    def extra_hf_fields(self, config: dict, where: str) -> dict:
        return {"embedding_multiplier": positive_number(config.get("embedding_multiplier", 1.0),
                                                        "embedding_multiplier", where)}


FAMILY = ToyFamily()
