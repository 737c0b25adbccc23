"""ModelConfig: the model shape the engine needs, and the checks every family's config reader uses
(the readers themselves are the families', :mod:`anydev.core.models.families`)."""
from __future__ import annotations

import json
import math
import numbers
import operator
from dataclasses import dataclass
from pathlib import Path

from .loading.checkpoint_errors import ModelLoadError

# rope types the engine implements; "default" is normalised to ``rope_scaling=None``.
SUPPORTED_ROPE_TYPES = ("llama3", "linear")


@dataclass
class ModelConfig:
    architecture: str            # a family of the model registry (anydev.core.models.registry)
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


def first_set(*values):
    """The first of ``values`` that is not None (None when all are)."""
    return next((v for v in values if v is not None), None)


def required(config: dict, key: str, source: str):
    """``config[key]``, or ModelLoadError when config.json lacks it."""
    if config.get(key) is None:
        raise ModelLoadError(f"{source}: config.json has no '{key}'")
    return config[key]
