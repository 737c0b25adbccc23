"""ModelFamily: what the engine needs to know about one model architecture, in one object.

A family says how to read its config (HF ``config.json`` and GGUF metadata), which tensors a
checkpoint of it holds (HF names), each tensor's shape, the slice a tensor-parallel rank holds, how
GGUF names map to HF names, and which class runs its layers on a rank (:attr:`ModelFamily.rank_class`).
Pipeline stages split every family the same way: by the ``model.layers.<i>.`` prefix of a name
(:meth:`~anydev.core.models.pipeline.Stage.holds`).

The defaults here are the Llama family's (llama, mistral, qwen2 differ only in biases and the
sliding window); a family overrides what differs. The registry (:mod:`.registry`) lists the families.
"""
from __future__ import annotations

from typing import Mapping

from ..model_config import (ModelConfig, ModelLoadError, check_attention, check_token_ids, first_set,
                            normalize_rope_scaling, positive_number, required, shape_int, union_ids)
from . import sharding
from .fusion import FUSIONS
from .llama import LlamaRank

#: GGUF tensor names of every family's global tensors -> HF names.
GGUF_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
#: llama.cpp's per-layer tensor parts of the Llama family -> HF parts.
LLAMA_GGUF_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}


class ModelFamily:
    """One architecture. Subclass it, set the class attributes, override what differs from Llama."""

    #: ``ModelConfig.architecture`` and HF's ``model_type``.
    name: str = ""
    #: HF class names (config.json ``architectures``) that mean this family.
    hf_architectures: tuple[str, ...] = ()
    #: llama.cpp ``general.architecture`` values read as this family.
    gguf_architectures: tuple[str, ...] = ()
    #: llama.cpp layer tensor parts -> HF parts (``blk.<i>.<part>.weight`` -> ``model.layers.<i>.<part>.weight``).
    gguf_layer_names: Mapping[str, str] = LLAMA_GGUF_LAYER_NAMES
    #: The class that runs the layers on one rank (constructed as :class:`~.llama.LlamaRank` is).
    rank_class: type = LlamaRank
    #: The ModelConfig (sub)class this family's configs are.
    config_class: type = ModelConfig

    # ---- config ------------------------------------------------------------------------------
    def config_from_hf(self, config: dict, generation_config: dict | None, source: str) -> ModelConfig:
        """The ModelConfig of a parsed config.json (and generation_config.json); ModelLoadError naming
        the field at fault. Understands transformers 4 (``rope_theta``/``rope_scaling``) and 5
        (``rope_parameters``) spellings."""
        generation_config = generation_config or {}
        if config.get("hidden_act", "silu") != "silu":
            raise ModelLoadError(f"{source}: hidden_act '{config['hidden_act']}' is not supported (only silu)")
        if config.get("mlp_bias"):
            raise ModelLoadError(f"{source}: mlp_bias=true is not supported")
        where = f"{source}/config.json"

        def size(key: str, default=None) -> int:
            value = config.get(key, default) if default is not None else required(config, key, source)
            return shape_int(value, key, where)

        hidden_size, heads = size("hidden_size"), size("num_attention_heads")
        kv_heads = heads if config.get("num_key_value_heads") is None else size("num_key_value_heads")
        if config.get("head_dim") is None and hidden_size % heads:
            raise ModelLoadError(f"{where}: 'hidden_size' ({hidden_size}) is not a multiple of 'num_attention_heads' "
                                 f"({heads}) and there is no 'head_dim'; fix it in the file")
        head_dim = hidden_size // heads if config.get("head_dim") is None else size("head_dim")
        rope = config.get("rope_parameters") or config.get("rope_scaling")
        rope_theta = first_set(config.get("rope_theta"), (config.get("rope_parameters") or {}).get("rope_theta"),
                               10000.0)
        vocab_size = size("vocab_size")
        generation_where = f"{source}/generation_config.json"
        attention_bias, output_bias = self.attention_biases(config)
        sliding_window = self.sliding_window(config)
        model = self.config_class(
            architecture=self.name,
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=size("intermediate_size"),
            num_hidden_layers=size("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=positive_number(config.get("rms_norm_eps", 1e-6), "rms_norm_eps", where),
            rope_theta=positive_number(rope_theta, "rope_theta", where),
            rope_scaling=normalize_rope_scaling(rope, source),
            max_position_embeddings=size("max_position_embeddings", 2048),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            attention_bias=attention_bias,
            torch_dtype=config.get("torch_dtype") or config.get("dtype"),
            bos_token_id=first_set(*check_token_ids(config.get("bos_token_id"), "bos_token_id", where, vocab_size),
                                   *check_token_ids(generation_config.get("bos_token_id"), "bos_token_id",
                                                    generation_where, vocab_size)),
            eos_token_ids=union_ids(check_token_ids(config.get("eos_token_id"), "eos_token_id", where, vocab_size),
                                    check_token_ids(generation_config.get("eos_token_id"), "eos_token_id",
                                                    generation_where, vocab_size)),
            attention_output_bias=output_bias,
            sliding_window=shape_int(sliding_window, "sliding_window", where) if sliding_window else None,
            **self.extra_hf_fields(config, where),
        )
        check_attention(model, where, "num_attention_heads", "num_key_value_heads")
        return model

    def attention_biases(self, config: dict) -> tuple[bool, bool]:
        """(q/k/v projections have a bias, o_proj has one) for a config.json."""
        bias = bool(config.get("attention_bias", False))
        return bias, bias

    def sliding_window(self, config: dict) -> int | None:
        """The attention window a config.json asks for (None: full attention)."""
        return None

    def extra_hf_fields(self, config: dict, where: str) -> dict:
        """Fields of :attr:`config_class` beyond ModelConfig's, read from a config.json."""
        return {}

    def config_from_gguf(self, config: ModelConfig, meta: dict, tensor_names: set[str], source: str) -> ModelConfig:
        """The family's config of a GGUF file: ``config`` has the fields every family shares (read from
        the ``<arch>.*`` keys by the loader); add or check this family's own from ``meta`` (the file's
        metadata) and ``tensor_names`` (its GGUF tensor names)."""
        return config

    # ---- tensors -----------------------------------------------------------------------------
    def tensor_names(self, config: ModelConfig) -> list[str]:
        """The HF tensor names a checkpoint of ``config`` must hold (lm_head only when untied), in the
        order a rank's weight buffer lays them out (parts that fuse back to back: see :meth:`fusions`)."""
        names = ["model.embed_tokens.weight", "model.norm.weight"]
        if not config.tie_word_embeddings:
            names.append("lm_head.weight")
        for i in range(config.num_hidden_layers):
            names += self.layer_tensor_names(config, i)
        return names

    def layer_tensor_names(self, config: ModelConfig, i: int) -> list[str]:
        """Layer ``i``'s tensor names."""
        layer = f"model.layers.{i}"
        names = [f"{layer}.self_attn.{p}_proj.weight" for p in "qkvo"]
        if config.attention_bias:
            names += [f"{layer}.self_attn.{p}_proj.bias" for p in "qkv"]
        if config.attention_output_bias:
            names.append(f"{layer}.self_attn.o_proj.bias")
        names += self.mlp_tensor_names(config, i)
        names += [f"{layer}.input_layernorm.weight", f"{layer}.post_attention_layernorm.weight"]
        return names

    def mlp_tensor_names(self, config: ModelConfig, i: int) -> list[str]:
        return [f"model.layers.{i}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]

    def full_shape(self, name: str, config: ModelConfig) -> tuple[int, ...]:
        """The shape of tensor ``name`` in the checkpoint (HF layout, [out, in])."""
        return sharding.full_shape(name, config)

    def slice_of(self, name: str, shard: sharding.RankShard) -> tuple[int, int, int] | None:
        """(dim, start, length) of the part of ``name`` that the rank ``shard`` holds; None: all of it."""
        return sharding.slice_of(name, shard)

    def local_shape(self, name: str, config: ModelConfig, shard: sharding.RankShard) -> tuple[int, ...]:
        """The shape of the rank's part of ``name``."""
        shape = list(self.full_shape(name, config))
        cut = self.slice_of(name, shard)
        if cut is not None:
            shape[cut[0]] = cut[2]
        return tuple(shape)

    def fusions(self, config: ModelConfig, i: int) -> dict[str, tuple[str, ...]]:
        """Layer ``i``'s fused views: fused name -> the parts (names after ``model.layers.<i>.``) it
        spans, in buffer order; the rank gets a view over the parts where they sit back to back."""
        return dict(FUSIONS)

    # ---- GGUF --------------------------------------------------------------------------------
    def gguf_permuted_heads(self, gguf_arch: str, config: ModelConfig) -> dict[str, int]:
        """HF name -> head count of each tensor whose rows llama.cpp's converter permuted for its
        rotary layout (the llama architecture's q/k only); the loader un-permutes them."""
        if gguf_arch != "llama":
            return {}
        permuted = {}
        for i in range(config.num_hidden_layers):
            for proj, n_head in (("q_proj", config.num_attention_heads), ("k_proj", config.num_key_value_heads)):
                for kind in ("weight", "bias"):
                    permuted[f"model.layers.{i}.self_attn.{proj}.{kind}"] = n_head
        return permuted

    def __repr__(self) -> str:
        return f"<model family {self.name!r} ({type(self).__module__}.{type(self).__qualname__})>"
