"""Malformed model configs and files are one ModelLoadError line naming the file and the field."""
from __future__ import annotations

import json

import pytest

from anydev.core.loading.checkpoint import ModelLoadError, open_checkpoint
from checkpoints import write_gguf_checkpoint, write_hf_checkpoint

pytest.importorskip("transformers", reason="the test checkpoints are written through transformers")


def single_line_error(call) -> str:
    with pytest.raises(ModelLoadError) as info:
        call()
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("hf") / "llama")


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    return write_gguf_checkpoint(tmp_path_factory.mktemp("gguf") / "model.gguf").path


@pytest.mark.parametrize("change, message", [
    (dict(num_attention_heads=0), "'num_attention_heads' must be an integer >= 1, got 0"),
    (dict(num_key_value_heads=0), "'num_key_value_heads' must be an integer >= 1, got 0"),
    (dict(num_key_value_heads=3), "'num_key_value_heads' (3) must divide 'num_attention_heads' (4)"),
    (dict(hidden_size=64.5), "'hidden_size' must be an integer >= 1, got 64.5"),
    (dict(hidden_size="64"), "'hidden_size' must be an integer >= 1, got '64'"),
    (dict(num_hidden_layers=True), "'num_hidden_layers' must be an integer >= 1, got True"),
    (dict(hidden_size=66), "'hidden_size' (66) is not a multiple of 'num_attention_heads' (4)"),
    (dict(rope_theta=float("nan")), "'rope_theta' must be a finite number > 0, got nan"),
    (dict(rms_norm_eps=-1e-06), "'rms_norm_eps' must be a finite number > 0, got -1e-06"),
    (dict(eos_token_id=10**9), "'eos_token_id' must be token ids in 0..319 (the vocabulary), got 1000000000"),
    (dict(eos_token_id=[2, -1]), "'eos_token_id' must be token ids in 0..319 (the vocabulary), got [2, -1]"),
])
def test_bad_hf_config_fields_are_named_with_the_file(hf_dir, tmp_path, change, message):
    directory = tmp_path / "model"
    directory.mkdir()
    for item in hf_dir.iterdir():
        (directory / item.name).symlink_to(item)
    config = json.loads((hf_dir / "config.json").read_text())
    config.pop("head_dim", None)
    config.update(change)
    (directory / "config.json").unlink()
    (directory / "config.json").write_text(json.dumps(config))
    error = single_line_error(lambda: open_checkpoint(directory))
    assert error.startswith(f"{directory}/config.json: ") and message in error, error


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
def test_a_config_that_is_no_json_object_is_named(hf_dir, tmp_path, name):
    directory = tmp_path / "model"
    directory.mkdir()
    for item in hf_dir.iterdir():
        if item.name != name:
            (directory / item.name).symlink_to(item)
    (directory / name).write_text("[1, 2]")
    error = single_line_error(lambda: open_checkpoint(directory))
    assert error.startswith(f"{directory}/{name}: must be a JSON object of settings, got a JSON list"), error


@pytest.mark.parametrize("field, value, message", [
    ("attention.head_count", 0, "'llama.attention.head_count' must be an integer >= 1, got 0"),
    ("attention.head_count_kv", 0, "'llama.attention.head_count_kv' must be an integer >= 1, got 0"),
    ("attention.head_count_kv", 3, "'llama.attention.head_count_kv' (3) must divide 'llama.attention.head_count' (4)"),
    ("embedding_length", 64.5, "'llama.embedding_length' must be an integer >= 1, got 64.5"),
])
def test_bad_gguf_metadata_is_named_with_the_file(gguf_file, field, value, message):
    from gguf import GGUFReader

    from anydev.core.loading.gguf_loader import gguf_model_config, read_metadata

    reader = GGUFReader(gguf_file)
    meta = read_metadata(reader)
    meta[f"llama.{field}"] = value
    meta.pop("llama.attention.key_length", None)
    tokenizer = open_checkpoint(gguf_file).tokenizer
    error = single_line_error(lambda: gguf_model_config(meta, reader, tokenizer, str(gguf_file)))
    assert error.startswith(f"{gguf_file}: ") and message in error, error


@pytest.mark.parametrize("keep", [64, 2000, 0.5, 0.999])
def test_a_truncated_gguf_file_is_called_truncated(gguf_file, tmp_path, keep):
    data = gguf_file.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:keep if isinstance(keep, int) else int(len(data) * keep)])
    error = single_line_error(lambda: open_checkpoint(path))
    assert error.startswith(f"{path}: truncated GGUF file: it has {path.stat().st_size} bytes"), error


def test_weights_holding_nan_are_one_error_naming_the_tensor(hf_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    from anydev.core import EngineConfig, EngineInitError, InferEngine

    directory = tmp_path / "model"
    directory.mkdir()
    for item in hf_dir.iterdir():
        if item.suffix != ".safetensors":
            (directory / item.name).symlink_to(item)
    name = "model.layers.1.mlp.up_proj.weight"
    for file in hf_dir.glob("*.safetensors"):
        tensors = load_file(file)
        if name in tensors:
            tensors[name][3, 5] = float("nan")
        save_file(tensors, directory / file.name, metadata={"format": "pt"})
    with pytest.raises(EngineInitError) as info:
        InferEngine(str(directory), EngineConfig(device="cpu", num_blocks=8))
    assert f"weight '{name}' holds NaN or infinite values" in str(info.value) and "\n" not in str(info.value)
