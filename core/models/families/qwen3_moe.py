"""Qwen3-MoE: Qwen3's attention (per-head q/k norms) and, in its sparse layers, a top-k router over
``num_experts`` experts in place of the MLP (:mod:`..moe`). A layer is sparse unless it is in
``mlp_only_layers`` or ``decoder_sparse_step`` skips it (HF's rule); the others keep a dense MLP of
``intermediate_size``.

Tensors (HF's per-expert names): ``mlp.gate.weight`` ``[E, hidden]`` (the router, replicated),
``mlp.experts.<e>.{gate,up}_proj.weight`` ``[moe_intermediate_size, hidden]`` and
``mlp.experts.<e>.down_proj.weight`` ``[hidden, moe_intermediate_size]``. Under TP every rank holds
every expert, split by the intermediate dimension (expert parallelism is a later step). The rank's
buffer lays out each expert's gate then up, expert after expert, then every down: the two stacks
``moe_linear`` reads are views of the buffer. GGUF: llama.cpp's ``qwen3moe`` (``ffn_gate_inp``, the
experts stacked in ``ffn_{gate,up,down}_exps``; ``expert_count``, ``expert_used_count``,
``expert_feed_forward_length``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..moe import expert_weights, sparse_moe
from ..sharding import RankShard
from ...model_config import ModelConfig, ModelLoadError, shape_int
from .qwen3 import QK_NORM_GGUF_NAMES, Qwen3Family, Qwen3Rank


@dataclass
class Qwen3MoeConfig(ModelConfig):
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    moe_layers: tuple[int, ...] = ()       # the sparse layers


def gate_up_parts(config, i: int) -> list[str]:
    return [f"model.layers.{i}.mlp.experts.{e}.{p}_proj.weight" for e in range(config.num_experts)
            for p in ("gate", "up")]


def down_parts(config, i: int) -> list[str]:
    return [f"model.layers.{i}.mlp.experts.{e}.down_proj.weight" for e in range(config.num_experts)]


class Qwen3MoeRank(Qwen3Rank):
    """Qwen3Rank whose sparse layers run :func:`..moe.sparse_moe`."""

    def __init__(self, config, shard, weights, *args, **kwargs):
        super().__init__(config, shard, weights, *args, **kwargs)
        for i, w in zip(self.stage.layers, self.layers):
            if i in config.moe_layers:
                p = f"model.layers.{i}.mlp."
                w["router"] = weights[p + "gate.weight"]
                w["experts_gate_up"] = expert_weights(weights, p + "experts.gate_up_proj.weight",
                                                      gate_up_parts(config, i), config.num_experts)
                w["experts_down"] = expert_weights(weights, p + "experts.down_proj.weight", down_parts(config, i),
                                                   config.num_experts)

    def _mlp(self, w, x):
        if w.get("router") is None:
            return super()._mlp(w, x)
        c = self.config
        return self._reduced(sparse_moe(self.kernels, x, w["router"], w["experts_gate_up"], w["experts_down"],
                                        c.num_experts_per_tok, c.norm_topk_prob))


class Qwen3MoeFamily(Qwen3Family):
    name = "qwen3_moe"
    hf_architectures = ("Qwen3MoeForCausalLM",)
    gguf_architectures = ("qwen3moe",)
    gguf_layer_names = {**QK_NORM_GGUF_NAMES, "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.gate_proj",
                        "ffn_up_exps": "mlp.experts.up_proj", "ffn_down_exps": "mlp.experts.down_proj"}
    rank_class = Qwen3MoeRank
    config_class = Qwen3MoeConfig

    def extra_hf_fields(self, config: dict, where: str) -> dict:
        experts_key = "num_experts" if config.get("num_experts") is not None else "num_local_experts"
        experts = shape_int(config.get(experts_key), experts_key, where)
        top_k = shape_int(config.get("num_experts_per_tok"), "num_experts_per_tok", where)
        if top_k > experts:
            raise ModelLoadError(f"{where}: 'num_experts_per_tok' ({top_k}) exceeds the {experts} experts; fix it "
                                 "in the file")
        step = shape_int(config.get("decoder_sparse_step", 1), "decoder_sparse_step", where)
        dense = set(config.get("mlp_only_layers") or [])
        layers = shape_int(config.get("num_hidden_layers"), "num_hidden_layers", where)
        return dict(num_experts=experts, num_experts_per_tok=top_k,
                    moe_intermediate_size=shape_int(config.get("moe_intermediate_size"), "moe_intermediate_size", where),
                    norm_topk_prob=bool(config.get("norm_topk_prob", False)),
                    moe_layers=tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0))

    def config_from_gguf(self, config, meta: dict, tensor_names: set[str], source: str):
        arch = meta["general.architecture"]

        def size(key: str) -> int:
            if meta.get(f"{arch}.{key}") is None:
                raise ModelLoadError(f"{source}: GGUF metadata lacks '{arch}.{key}'")
            return shape_int(meta[f"{arch}.{key}"], f"{arch}.{key}", source)

        config.num_experts, config.num_experts_per_tok = size("expert_count"), size("expert_used_count")
        config.moe_intermediate_size = size("expert_feed_forward_length")
        # llama.cpp renormalises qwen3moe's top-k weights (every released Qwen3-MoE sets norm_topk_prob)
        config.norm_topk_prob = bool(meta.get(f"{arch}.expert_weights_norm", True))
        config.moe_layers = tuple(i for i in range(config.num_hidden_layers)
                                  if f"blk.{i}.ffn_gate_inp.weight" in tensor_names)
        return config

    def mlp_tensor_names(self, config, i: int) -> list[str]:
        if i not in config.moe_layers:
            return super().mlp_tensor_names(config, i)
        return [f"model.layers.{i}.mlp.gate.weight", *gate_up_parts(config, i), *down_parts(config, i)]

    def full_shape(self, name: str, config) -> tuple[int, ...]:
        h, inter = config.hidden_size, config.moe_intermediate_size
        if name.endswith(".mlp.gate.weight"):
            return (config.num_experts, h)
        if ".mlp.experts." in name:
            return (h, inter) if name.endswith("down_proj.weight") else (inter, h)
        return super().full_shape(name, config)

    def slice_of(self, name: str, shard: RankShard):
        if ".mlp.experts." in name:
            part = shard.moe_intermediate_size
            return (1 if name.endswith("down_proj.weight") else 0, shard.rank * part, part)
        return super().slice_of(name, shard)

    def fusions(self, config, i: int) -> dict[str, tuple[str, ...]]:
        groups = super().fusions(config, i)
        if i in config.moe_layers:
            strip = len(f"model.layers.{i}.")
            groups["mlp.experts.gate_up_proj.weight"] = tuple(n[strip:] for n in gate_up_parts(config, i))
            groups["mlp.experts.down_proj.weight"] = tuple(n[strip:] for n in down_parts(config, i))
        return groups


FAMILY = Qwen3MoeFamily()
