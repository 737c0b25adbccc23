"""The tokenizer of an HF model directory: tokenizer.json + tokenizer_config.json (+ chat_template.jinja)."""
from __future__ import annotations

from pathlib import Path

import tokenizers

from .checkpoint_errors import ModelLoadError
from ..config import ModelConfig, read_json, union_ids
from .tokenizer import Tokenizer

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _token_text(value) -> str | None:
    """tokenizer_config stores a special token as a string or as a serialised AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _chat_template(directory: Path, tokenizer_config: dict) -> str | None:
    jinja_file = directory / "chat_template.jinja"   # where transformers 5 saves it
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):   # several named templates: use the default one
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default")
    if template is None and (directory / "chat_template.json").is_file():
        template = read_json(directory / "chat_template.json").get("chat_template")
    return template


def load_hf_tokenizer(directory: Path, config: ModelConfig) -> Tokenizer:
    tokenizer_path = directory / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise ModelLoadError(f"{directory}: no tokenizer.json (only fast tokenizers are supported)")
    try:
        backend = tokenizers.Tokenizer.from_file(str(tokenizer_path))
    except Exception as err:  # tokenizers raises a bare Exception for malformed files
        raise ModelLoadError(f"{tokenizer_path}: not a valid tokenizer.json ({err})") from err
    config_path = directory / "tokenizer_config.json"
    tokenizer_config = read_json(config_path) if config_path.is_file() else {}

    special = {name: _token_text(tokenizer_config.get(name)) for name in SPECIAL_TOKEN_NAMES}
    bos_id = backend.token_to_id(special["bos_token"]) if special["bos_token"] else None
    eos_id = backend.token_to_id(special["eos_token"]) if special["eos_token"] else None
    return Tokenizer(
        backend,
        chat_template=_chat_template(directory, tokenizer_config),
        special_tokens=special,
        bos_token_id=bos_id if bos_id is not None else config.bos_token_id,
        eos_token_ids=union_ids(config.eos_token_ids, [eos_id] if eos_id is not None else []),
    )
