"""The model registry: the built-in families, a family added by one file and one registration line
(the toy of toy_family.py, as docs/models.md shows), entry-point families, and the typed errors of a
bad registration."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import ModelLoadError, open_checkpoint
from anydev.core.models import registry as registry_module
from anydev.core.models.family import ModelFamily
from anydev.core.models.registry import ModelRegistrationError, ModelRegistry, model_registry, register_family
from checkpoints import write_hf_checkpoint
from toy_family import FAMILY as TOY

MULTIPLIER = 3.0


@pytest.fixture
def toy_registered():
    register_family(TOY)
    yield TOY
    model_registry().unregister(TOY.name)


def as_toy(directory, multiplier: float):
    """The llama checkpoint in ``directory`` relabelled as a toy model (same tensors)."""
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(model_type="toy", architectures=["ToyForCausalLM"], embedding_multiplier=multiplier)
    path.write_text(json.dumps(config))
    return directory


def scale_embeddings(directory, factor: float) -> None:
    """Multiply the llama checkpoint's token embeddings by ``factor`` in place (untied: lm_head stays)."""
    from safetensors.torch import load_file, save_file
    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"] * factor
    save_file(tensors, str(path), metadata={"format": "pt"})


def greedy(directory, prompts):
    with InferEngine(directory, EngineConfig(block_size=4)) as engine:
        return [out.token_ids for out in engine.generate_ids(prompts, SamplingParams(max_new_tokens=8))]


def test_builtin_families_are_registered():
    assert {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe"} <= set(model_registry().names())
    assert model_registry().for_hf({"architectures": ["Qwen3MoeForCausalLM"]}).name == "qwen3_moe"
    assert model_registry().for_gguf("qwen3moe").name == "qwen3_moe"
    assert model_registry().for_hf({"architectures": ["Qwen2ForCausalLM"]}).name == "qwen2"
    assert model_registry().for_gguf("llama").name == "llama"


def test_a_registered_toy_family_runs_its_own_layer(tmp_path, toy_registered):
    """The toy's tokens equal llama's on weights whose embedding is pre-multiplied (the same math),
    and differ from llama's on the unscaled ones: the engine ran the toy's rank class."""
    prompts = [[5, 9, 20, 33], [7, 8]]
    plain = write_hf_checkpoint(tmp_path / "plain", arch="llama")
    llama_tokens = greedy(plain, prompts)
    scaled = write_hf_checkpoint(tmp_path / "scaled", arch="llama")
    scale_embeddings(scaled, MULTIPLIER)
    scaled_tokens = greedy(scaled, prompts)
    toy = as_toy(write_hf_checkpoint(tmp_path / "toy", arch="llama"), MULTIPLIER)
    with open_checkpoint(toy) as checkpoint:
        assert checkpoint.config.architecture == "toy" and checkpoint.config.embedding_multiplier == MULTIPLIER
    assert greedy(toy, prompts) == scaled_tokens
    assert scaled_tokens != llama_tokens


def test_an_unregistered_family_is_an_unsupported_architecture(tmp_path):
    toy = as_toy(write_hf_checkpoint(tmp_path / "toy", arch="llama"), MULTIPLIER)
    with pytest.raises(ModelLoadError, match=r"unsupported architecture 'toy'; supported: llama, mistral, qwen2"):
        open_checkpoint(toy)


class Unnamed(ModelFamily):
    hf_architectures = ("UnnamedForCausalLM",)


class ClaimsLlama(ModelFamily):
    name = "llama_too"
    hf_architectures = ("LlamaForCausalLM",)


class ListNotTuple(ModelFamily):
    name = "listy"
    hf_architectures = ["ListyForCausalLM"]


@pytest.mark.parametrize("family, message", [
    (object(), r"not an anydev.core.models.family.ModelFamily"),
    (Unnamed, r"family name '' must be a non-empty identifier"),
    (TOY.__class__, None),
    (ClaimsLlama, r"claims hf_architectures 'LlamaForCausalLM', which family 'llama' already reads"),
    (ListNotTuple, r"hf_architectures must be a tuple of names"),
])
def test_bad_registrations_are_typed_errors(family, message):
    registry = ModelRegistry()
    if message is None:      # a second family of one name
        registry.register(family)
        message = r"family 'toy' is already registered by register_family\(\)"
    with pytest.raises(ModelRegistrationError, match=message):
        registry.register(family)


def fake_entry_points(monkeypatch, entries):
    def entry_points(group):
        assert group == registry_module.ENTRY_POINT_GROUP
        return [SimpleNamespace(name=name, value=f"pkg:{name}", load=load) for name, load in entries]
    monkeypatch.setattr(registry_module.importlib.metadata, "entry_points", entry_points)


def test_entry_point_families_register_and_broken_ones_are_reported_on_use(monkeypatch):
    def broken():
        raise ImportError("no module named pkg")

    fake_entry_points(monkeypatch, [("toy", lambda: TOY), ("wrong_name", lambda: TOY), ("gone", broken)])
    registry = ModelRegistry()
    assert registry.get("toy") is TOY
    assert registry.for_hf({"architectures": ["ToyForCausalLM"]}) is TOY
    assert registry.get("llama").name == "llama"     # the built-ins beside them
    with pytest.raises(ModelRegistrationError, match=r"'gone' could not be registered: ImportError: no module named pkg"):
        registry.get("gone")
    with pytest.raises(ModelRegistrationError, match=r"named 'wrong_name' but its family is 'toy'"):
        registry.get("wrong_name")


def test_a_config_of_a_registered_family_is_checked_before_loading():
    """validate_config names the families when a config's architecture is none of them."""
    from anydev.core.engine_config import validate_config
    from anydev.core.errors import EngineConfigError
    from anydev.core.loading.demo_model import demo_config
    config = demo_config()
    config.architecture = "nope"
    with pytest.raises(EngineConfigError, match=r"architecture 'nope' is not supported; supported: llama"):
        validate_config(EngineConfig(), config)


def test_the_docs_show_the_whole_toy_family():
    """docs/models.md's "one file" is toy_family.py's code: every line after its imports, in order."""
    import anydev
    docs = (Path(anydev.__file__).parent / "docs" / "models.md").read_text()
    section = docs[docs.index("## Adding a family"):]
    shown = section[section.index("```python\n") + len("```python\n"):section.index("```", section.index("```python") + 3)]
    code = Path(__file__).with_name("toy_family.py").read_text()
    body = code[code.index("\n\n\n@dataclass") + 3:]
    assert [line for line in shown.splitlines() if line.strip()] == \
        [line for line in body.splitlines() if line.strip()]
