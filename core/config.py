"""ModelConfig: the model shape the engine needs, parsed from HF ``config.json`` +
``generation_config.json`` (GGUF metadata is parsed in :mod:`.gguf_loader`)."""
from __future__ import annotations

import json
import math
import numbers
import operator
from dataclasses import dataclass
from pathlib import Path

from .loading.checkpoint_errors import ModelLoadError

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2")
_ARCHITECTURE_CLASSES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
}
# rope types the engine implements; "default" is normalised to ``rope_scaling=None``.
SUPPORTED_ROPE_TYPES = ("llama3", "linear")


@dataclass
class ModelConfig:
    architecture: str            # "llama" | "mistral" | "qwen2"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None    # None, or an HF dict whose "rope_type" is in SUPPORTED_ROPE_TYPES
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool         # q/k/v projections have a bias (qwen2: always)
    torch_dtype: str | None      # as stored ("bfloat16", ...)
    bos_token_id: int | None
    eos_token_ids: list[int]     # union of config + generation_config
    # Extensions beyond the agreed interface (defaults keep older callers working):
    attention_output_bias: bool = False   # o_proj has a bias (llama with attention_bias=True)
    sliding_window: int | None = None     # mistral/qwen2 window; None means full attention


def read_json(path: Path) -> dict:
    """A JSON file of the checkpoint, or ModelLoadError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"{path}: cannot be read as JSON ({err})") from err


def union_ids(*id_lists: list[int]) -> list[int]:
    """The ids of every list, first occurrence first, without repeats."""
    merged: list[int] = []
    for ids in id_lists:
        merged.extend(i for i in ids if i not in merged)
    return merged


def architecture_of(config: dict, source: str) -> str:
    """The supported architecture name a config.json describes, or ModelLoadError."""
    model_type = config.get("model_type")
    if model_type in SUPPORTED_ARCHITECTURES:
        return model_type
    for class_name in config.get("architectures") or []:
        if class_name in _ARCHITECTURE_CLASSES:
            return _ARCHITECTURE_CLASSES[class_name]
    described = model_type or ", ".join(config.get("architectures") or []) or "(none given)"
    raise ModelLoadError(
        f"{source}: unsupported architecture '{described}'; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")


def normalize_rope_scaling(scaling: dict | None, source: str) -> dict | None:
    """An HF rope-scaling dict with its type under "rope_type", or None for plain rope.

    Raises ModelLoadError for a type the engine does not implement (yarn, dynamic, longrope, ...).
    """
    if not scaling:
        return None
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if rope_type in (None, "default"):
        return None
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ModelLoadError(
            f"{source}: unsupported rope scaling type '{rope_type}'; supported: none, "
            + ", ".join(SUPPORTED_ROPE_TYPES))
    normalized = {k: v for k, v in scaling.items() if k not in ("type", "rope_theta")}
    normalized["rope_type"] = rope_type
    if "factor" not in normalized:
        raise ModelLoadError(f"{source}: rope scaling '{rope_type}' has no 'factor'")
    return normalized


def shape_int(value, field: str, where: str) -> int:
    """``value`` as an integer >= 1 (an integral float is accepted), or ModelLoadError naming
    ``field`` as ``where`` (the file) spells it."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < 1:
        raise ModelLoadError(f"{where}: '{field}' must be an integer >= 1, got {value!r}; fix it in the file")
    return number


def positive_number(value, field: str, where: str) -> float:
    """``value`` as a finite float > 0, or ModelLoadError naming ``field`` as ``where`` spells it."""
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(number) and number > 0):
        raise ModelLoadError(f"{where}: '{field}' must be a finite number > 0, got {value!r}; fix it in the file")
    return number


def check_token_ids(ids, field: str, where: str, vocab_size: int) -> list[int]:
    """``ids`` (None, an id or a list of ids) as a list of ids in the vocabulary, or ModelLoadError
    naming ``field``: an id outside it would never match a sampled token, and generation would run on."""
    values = [] if ids is None else ids if isinstance(ids, list) else [ids]
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
            raise ModelLoadError(f"{where}: '{field}' must be token ids in 0..{vocab_size - 1} (the vocabulary), "
                                 f"got {ids!r}; fix it in the file")
    return values


def check_attention(config: ModelConfig, where: str, heads_field: str, kv_heads_field: str) -> None:
    """The head counts and head size must fit together (the fields named as ``where`` spells them)."""
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if heads % kv_heads:
        raise ModelLoadError(f"{where}: '{kv_heads_field}' ({kv_heads}) must divide '{heads_field}' ({heads}); "
                             "fix it in the file")
    if config.head_dim % 2:
        raise ModelLoadError(f"{where}: the head size {config.head_dim} is odd; rotary embeddings need an even one")


def _first_set(*values):
    return next((v for v in values if v is not None), None)


def _required(config: dict, key: str, source: str):
    if config.get(key) is None:
        raise ModelLoadError(f"{source}: config.json has no '{key}'")
    return config[key]


def model_config_from_hf(config: dict, generation_config: dict | None, source: str) -> ModelConfig:
    """Build a ModelConfig from the parsed config.json (and generation_config.json, if any).

    Understands both transformers 4 (top-level ``rope_theta`` / ``rope_scaling``) and transformers 5
    (``rope_parameters``) spellings.
    """
    if not isinstance(config, dict):
        raise ModelLoadError(f"{source}/config.json: must be a JSON object of settings, got a JSON "
                             f"{type(config).__name__}; fix the file")
    if generation_config is not None and not isinstance(generation_config, dict):
        raise ModelLoadError(f"{source}/generation_config.json: must be a JSON object of settings, got a JSON "
                             f"{type(generation_config).__name__}; fix or remove the file")
    generation_config = generation_config or {}
    architecture = architecture_of(config, source)
    if config.get("hidden_act", "silu") != "silu":
        raise ModelLoadError(f"{source}: hidden_act '{config['hidden_act']}' is not supported (only silu)")
    if config.get("mlp_bias"):
        raise ModelLoadError(f"{source}: mlp_bias=true is not supported")

    where = f"{source}/config.json"

    def size(key: str, default=None) -> int:
        value = config.get(key, default) if default is not None else _required(config, key, source)
        return shape_int(value, key, where)

    hidden_size, heads = size("hidden_size"), size("num_attention_heads")
    kv_heads = heads if config.get("num_key_value_heads") is None else size("num_key_value_heads")
    if config.get("head_dim") is None and hidden_size % heads:
        raise ModelLoadError(f"{where}: 'hidden_size' ({hidden_size}) is not a multiple of 'num_attention_heads' "
                             f"({heads}) and there is no 'head_dim'; fix it in the file")
    head_dim = hidden_size // heads if config.get("head_dim") is None else size("head_dim")
    rope = config.get("rope_parameters") or config.get("rope_scaling")
    rope_theta = _first_set(config.get("rope_theta"), (config.get("rope_parameters") or {}).get("rope_theta"), 10000.0)
    vocab_size = size("vocab_size")
    generation_where = f"{source}/generation_config.json"

    if architecture == "qwen2":
        attention_bias, output_bias = True, False
        sliding_window = config.get("sliding_window") if config.get("use_sliding_window") else None
    else:
        attention_bias = output_bias = bool(config.get("attention_bias", False))
        sliding_window = config.get("sliding_window") if architecture == "mistral" else None

    model = ModelConfig(
        architecture=architecture,
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
        bos_token_id=_first_set(*check_token_ids(config.get("bos_token_id"), "bos_token_id", where, vocab_size),
                                *check_token_ids(generation_config.get("bos_token_id"), "bos_token_id",
                                                 generation_where, vocab_size)),
        eos_token_ids=union_ids(check_token_ids(config.get("eos_token_id"), "eos_token_id", where, vocab_size),
                                check_token_ids(generation_config.get("eos_token_id"), "eos_token_id",
                                                generation_where, vocab_size)),
        attention_output_bias=output_bias,
        sliding_window=shape_int(sliding_window, "sliding_window", where) if sliding_window else None,
    )
    check_attention(model, where, "num_attention_heads", "num_key_value_heads")
    return model


def expected_tensor_names(config: ModelConfig) -> list[str]:
    """The HF tensor names a checkpoint of this config must hold (lm_head only when untied)."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config.tie_word_embeddings:
        names.append("lm_head.weight")
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}"
        names += [f"{layer}.self_attn.{p}_proj.weight" for p in "qkvo"]
        if config.attention_bias:
            names += [f"{layer}.self_attn.{p}_proj.bias" for p in "qkv"]
        if config.attention_output_bias:
            names.append(f"{layer}.self_attn.o_proj.bias")
        names += [f"{layer}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        names += [f"{layer}.input_layernorm.weight", f"{layer}.post_attention_layernorm.weight"]
    return names
