"""HF checkpoints, the tokenizer wrapper and the embedded demo model, checked against transformers."""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
import torch

from anydev.core.loading import hf_loader
from anydev.core.loading.checkpoint import ChatTemplateError, ModelLoadError, demo_checkpoint, open_checkpoint
from anydev.core.config import expected_tensor_names
from checkpoints import hf_state_dict, read_index, write_hf_checkpoint

transformers = pytest.importorskip("transformers", reason="transformers is the reference these tests compare to")

ARCHS = ["llama", "mistral", "qwen2"]
TEXTS = ["Hello world!", "", "  leading spaces\n\nand\ttabs", "the <s> quick </s> fox <|im_end|> jumps",
         "unicode: naïve café — 東京 🚀", "def main():\n    return 0\n"]
CONVERSATION = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """One tiny checkpoint per (arch, layout), written once for the module."""
    root = tmp_path_factory.mktemp("hf")
    layouts = {f"{arch}": dict(arch=arch) for arch in ARCHS}
    layouts["llama-sharded"] = dict(arch="llama", sharded=True)
    layouts["qwen2-tied"] = dict(arch="qwen2", tied=True)
    return {name: write_hf_checkpoint(root / name, **kwargs) for name, kwargs in layouts.items()}


def single_line_error(call) -> str:
    with pytest.raises(ModelLoadError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------------------- configs
@pytest.mark.parametrize("arch", ARCHS)
def test_config_matches_transformers(checkpoints, arch):
    directory = checkpoints[arch]
    reference = transformers.AutoConfig.from_pretrained(directory)
    generation = json.loads((directory / "generation_config.json").read_text())
    with open_checkpoint(directory) as ckpt:
        config = ckpt.config
    assert config.architecture == arch
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings"):
        assert getattr(config, field) == getattr(reference, field), field
    assert config.num_key_value_heads < config.num_attention_heads   # GQA present
    assert config.head_dim == reference.hidden_size // reference.num_attention_heads
    assert config.rope_theta == reference.rope_parameters["rope_theta"]
    assert config.rope_scaling is None
    assert config.attention_bias is (arch == "qwen2")
    assert config.bos_token_id == reference.bos_token_id
    expected_eos = [reference.eos_token_id] + [i for i in generation["eos_token_id"] if i != reference.eos_token_id]
    assert config.eos_token_ids == list(dict.fromkeys(expected_eos))
    assert config.sliding_window == (reference.sliding_window if arch == "mistral" else None)


def test_eos_ids_are_the_union_of_config_and_generation_config(checkpoints):
    with open_checkpoint(checkpoints["qwen2"]) as ckpt:
        tokenizer = ckpt.tokenizer
        assert sorted(ckpt.config.eos_token_ids) == sorted(
            [tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|im_end|>")])
        assert ckpt.config.bos_token_id is None


def test_llama3_rope_scaling_is_passed_through(tmp_path):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 128}
    write_hf_checkpoint(tmp_path, "llama", rope_scaling=dict(scaling), rope_theta=500000.0, max_position_embeddings=1024)
    with open_checkpoint(tmp_path) as ckpt:
        assert ckpt.config.rope_scaling == scaling
        assert ckpt.config.rope_theta == 500000.0


def test_transformers4_config_spelling_is_understood(checkpoints, tmp_path):
    """Older config.json files keep rope_theta / rope_scaling at the top level."""
    directory = Path(shutil.copytree(checkpoints["llama"], tmp_path / "v4"))
    config = json.loads((directory / "config.json").read_text())
    config.pop("rope_parameters")
    config.update(rope_theta=123456.0, rope_scaling={"type": "linear", "factor": 2.0}, torch_dtype="bfloat16")
    config.pop("dtype", None)
    (directory / "config.json").write_text(json.dumps(config))
    with open_checkpoint(directory) as ckpt:
        assert ckpt.config.rope_theta == 123456.0
        assert ckpt.config.rope_scaling == {"rope_type": "linear", "factor": 2.0}
        assert ckpt.config.torch_dtype == "bfloat16"


# ------------------------------------------------------------------------------------------- tensors
@pytest.mark.parametrize("layout", ARCHS + ["llama-sharded", "qwen2-tied"])
def test_tensors_equal_what_transformers_loads(checkpoints, layout):
    reference = hf_state_dict(checkpoints[layout])
    with open_checkpoint(checkpoints[layout]) as ckpt:
        names = ckpt.tensor_names()
        assert sorted(names) == sorted(expected_tensor_names(ckpt.config))
        assert ("lm_head.weight" in names) is not ckpt.config.tie_word_embeddings
        for name in names:
            tensor = ckpt.load(name)
            assert tensor.dtype == torch.float32 and tensor.device.type == "cpu"
            assert torch.equal(tensor, reference[name]), name


def test_sharded_checkpoint_opens_only_the_files_its_index_names(checkpoints, tmp_path, monkeypatch):
    directory = Path(shutil.copytree(checkpoints["llama-sharded"], tmp_path / "sharded"))
    indexed = {directory / f for f in read_index(directory)["weight_map"].values()}
    assert len(indexed) > 1
    (directory / "model-decoy.safetensors").write_bytes(b"not a safetensors file")   # would fail to open
    (directory / "model.safetensors").write_bytes(b"also not one")
    opened = []
    real_safe_open = hf_loader.safe_open
    monkeypatch.setattr(hf_loader, "safe_open", lambda path, **kw: opened.append(Path(path)) or real_safe_open(path, **kw))
    reference = hf_state_dict(checkpoints["llama-sharded"])
    with open_checkpoint(directory) as ckpt:
        for name in ckpt.tensor_names():
            assert torch.equal(ckpt.load(name), reference[name])
    assert set(opened) == indexed


def test_loads_from_several_threads_agree(checkpoints):
    with open_checkpoint(checkpoints["llama-sharded"]) as ckpt:
        names = ckpt.tensor_names()
        serial = {name: ckpt.load(name) for name in names}
        results, errors = {}, []

        def load_all(rank: int):
            try:
                results[rank] = {name: ckpt.load(name) for name in names}
            except Exception as err:   # reported below; a thread's exception is otherwise lost
                errors.append(err)

        threads = [threading.Thread(target=load_all, args=(r,)) for r in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    for rank in range(4):
        assert all(torch.equal(results[rank][n], serial[n]) for n in names)


def test_closed_checkpoint_refuses_loads(checkpoints):
    ckpt = open_checkpoint(checkpoints["llama"])
    ckpt.close()
    single_line_error(lambda: ckpt.load("model.norm.weight"))


def test_unknown_tensor_name_is_a_key_error(checkpoints):
    with open_checkpoint(checkpoints["qwen2-tied"]) as ckpt, pytest.raises(KeyError, match="lm_head.weight"):
        ckpt.load("lm_head.weight")


# ----------------------------------------------------------------------------------------- tokenizer
@pytest.mark.parametrize("arch", ARCHS)
def test_token_ids_equal_autotokenizer(checkpoints, arch):
    reference = transformers.AutoTokenizer.from_pretrained(checkpoints[arch])
    with open_checkpoint(checkpoints[arch]) as ckpt:
        tokenizer = ckpt.tokenizer
    for text in TEXTS:
        for special in (True, False):
            ids = tokenizer.encode(text, add_special_tokens=special)
            assert ids == reference(text, add_special_tokens=special)["input_ids"], (text, special)
            for skip in (True, False):
                assert tokenizer.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)
    assert tokenizer.bos_token_id == reference.bos_token_id
    assert reference.eos_token_id in tokenizer.eos_token_ids


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_renders_as_transformers_does(checkpoints, arch, add_generation_prompt):
    reference = transformers.AutoTokenizer.from_pretrained(checkpoints[arch])
    with open_checkpoint(checkpoints[arch]) as ckpt:
        assert ckpt.tokenizer.has_chat_template
        ours = ckpt.tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=add_generation_prompt)
    assert ours == reference.apply_chat_template(CONVERSATION, tokenize=False,
                                                 add_generation_prompt=add_generation_prompt)


def test_chat_template_raise_exception_becomes_chat_template_error(checkpoints):
    with open_checkpoint(checkpoints["llama"]) as ckpt:
        with pytest.raises(ChatTemplateError, match="roles must alternate"):
            ckpt.tokenizer.apply_chat_template([{"role": "assistant", "content": "first"}])


# --------------------------------------------------------------------------------------- bad inputs
def test_missing_path(tmp_path):
    message = single_line_error(lambda: open_checkpoint(tmp_path / "nope"))
    assert "does not exist" in message and "nope" in message


def test_directory_without_config(tmp_path):
    assert "config.json" in single_line_error(lambda: open_checkpoint(tmp_path))


def test_directory_without_weights_lists_what_it_looked_for(checkpoints, tmp_path):
    directory = tmp_path / "noweights"
    directory.mkdir()
    shutil.copy(checkpoints["llama"] / "config.json", directory)
    message = single_line_error(lambda: open_checkpoint(directory))
    assert "no weights" in message and "model.safetensors" in message and "model.safetensors.index.json" in message


def test_unsupported_architecture_is_named(checkpoints, tmp_path):
    directory = Path(shutil.copytree(checkpoints["llama"], tmp_path / "gpt2"))
    config = json.loads((directory / "config.json").read_text())
    config.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (directory / "config.json").write_text(json.dumps(config))
    message = single_line_error(lambda: open_checkpoint(directory))
    assert "gpt2" in message and all(arch in message for arch in ARCHS)


def test_unsupported_rope_type_is_named(checkpoints, tmp_path):
    directory = Path(shutil.copytree(checkpoints["llama"], tmp_path / "yarn"))
    config = json.loads((directory / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
    (directory / "config.json").write_text(json.dumps(config))
    assert "yarn" in single_line_error(lambda: open_checkpoint(directory))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "huge header length"])
def test_corrupt_safetensors_header_names_the_file(checkpoints, tmp_path, damage):
    directory = Path(shutil.copytree(checkpoints["llama"], tmp_path / "corrupt"))
    weights = directory / "model.safetensors"
    data = weights.read_bytes()
    damaged = {"garbage": b"\x00\x01garbage" * 10, "truncated": data[:40],
               "huge header length": (2**40).to_bytes(8, "little") + data[8:]}[damage]
    weights.write_bytes(damaged)
    message = single_line_error(lambda: open_checkpoint(directory))
    assert "model.safetensors" in message and "corrupt" in message


def test_index_naming_a_missing_shard(checkpoints, tmp_path):
    directory = Path(shutil.copytree(checkpoints["llama-sharded"], tmp_path / "missing"))
    shard = sorted(set(read_index(directory)["weight_map"].values()))[0]
    (directory / shard).unlink()
    message = single_line_error(lambda: open_checkpoint(directory))
    assert shard in message and "missing" in message


def test_checkpoint_lacking_tensors_the_config_requires(checkpoints, tmp_path):
    directory = Path(shutil.copytree(checkpoints["llama"], tmp_path / "short"))
    config = json.loads((directory / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (directory / "config.json").write_text(json.dumps(config))
    assert "model.layers.2." in single_line_error(lambda: open_checkpoint(directory))


def test_plain_file_is_not_a_model(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x")
    assert ".gguf" in single_line_error(lambda: open_checkpoint(path))


# ---------------------------------------------------------------------------------------- demo model
def test_demo_model_is_deterministic_and_independent_of_global_rng():
    torch.manual_seed(1)
    first = demo_checkpoint(seed=0)
    torch.manual_seed(2)
    torch.rand(10)
    second = demo_checkpoint(seed=0)
    other = demo_checkpoint(seed=1)
    for name in first.tensor_names():
        assert torch.equal(first.load(name), second.load(name)), name
    assert not torch.equal(first.load("model.embed_tokens.weight"), other.load("model.embed_tokens.weight"))


def test_demo_model_shape_supports_tp_2_and_4():
    ckpt = demo_checkpoint()
    config = ckpt.config
    assert sorted(ckpt.tensor_names()) == sorted(expected_tensor_names(config))
    assert config.num_attention_heads % 4 == 0 and config.num_key_value_heads == 2
    for name in ckpt.tensor_names():
        assert ckpt.load(name).dtype == torch.float32
    assert ckpt.load("model.layers.0.self_attn.k_proj.weight").shape == (
        config.num_key_value_heads * config.head_dim, config.hidden_size)
    assert ckpt.tokenizer.vocab_size <= config.vocab_size


def test_demo_tokenizer_round_trips_and_has_a_chat_template():
    tokenizer = demo_checkpoint().tokenizer
    text = "hello world, the model is on the device.\nünïcödé"
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_token_id and len(ids) < len(text.encode())   # merges apply
    assert tokenizer.decode(ids) == text
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt.startswith("<s>user: hi") and prompt.endswith("assistant:")


def test_demo_model_greedy_output_is_not_degenerate():
    """Run the demo weights through transformers' Llama: greedy continuations use many tokens."""
    ckpt = demo_checkpoint()
    c = ckpt.config
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, rms_norm_eps=c.rms_norm_eps, rope_theta=c.rope_theta,
        max_position_embeddings=c.max_position_embeddings, tie_word_embeddings=False))
    model.load_state_dict({name: ckpt.load(name) for name in ckpt.tensor_names()}, strict=True)
    prompt = torch.tensor([ckpt.tokenizer.encode("hello world")])
    with torch.no_grad():
        generated = model.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None,
                                   pad_token_id=0)[0, prompt.shape[1]:].tolist()
    assert len(set(generated)) >= 8


def test_pytorch_bin_weights_get_a_hint(checkpoints, tmp_path):
    directory = tmp_path / "bin"
    directory.mkdir()
    shutil.copy(checkpoints["llama"] / "config.json", directory)
    (directory / "pytorch_model.bin").write_bytes(b"pickle")
    assert ".bin weights are not supported" in single_line_error(lambda: open_checkpoint(directory))
