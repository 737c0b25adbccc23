"""ModelConfig from HF ``config.json`` + ``generation_config.json``, through the model registry (each
family reads its own config: :mod:`anydev.core.models.families`; GGUF metadata is read in
:mod:`.loading.gguf_loader`). The shape checks every family uses live in :mod:`.model_config`."""
from __future__ import annotations

from .loading.checkpoint_errors import ModelLoadError
from .model_config import (SUPPORTED_ROPE_TYPES, ModelConfig, check_attention, check_token_ids,  # noqa: F401
                           normalize_rope_scaling, positive_number, read_json, shape_int, union_ids)
from .models.registry import family_of, model_registry


def __getattr__(name: str):
    if name == "SUPPORTED_ARCHITECTURES":    # the registered families, built-in and from entry points
        return tuple(model_registry().names())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def architecture_of(config: dict, source: str) -> str:
    """The registered family name a config.json describes, or ModelLoadError."""
    family = model_registry().for_hf(config)
    if family is not None:
        return family.name
    model_type = config.get("model_type")
    described = model_type or ", ".join(config.get("architectures") or []) or "(none given)"
    raise ModelLoadError(f"{source}: unsupported architecture '{described}'; supported: "
                         f"{', '.join(model_registry().names())}")


def model_config_from_hf(config: dict, generation_config: dict | None, source: str) -> ModelConfig:
    """Build a ModelConfig from the parsed config.json (and generation_config.json, if any), by the
    family that config names."""
    if not isinstance(config, dict):
        raise ModelLoadError(f"{source}/config.json: must be a JSON object of settings, got a JSON "
                             f"{type(config).__name__}; fix the file")
    if generation_config is not None and not isinstance(generation_config, dict):
        raise ModelLoadError(f"{source}/generation_config.json: must be a JSON object of settings, got a JSON "
                             f"{type(generation_config).__name__}; fix or remove the file")
    return family_of(architecture_of(config, source)).config_from_hf(config, generation_config, source)


def expected_tensor_names(config: ModelConfig) -> list[str]:
    """The HF tensor names a checkpoint of this config must hold (lm_head only when untied)."""
    return family_of(config).tensor_names(config)
