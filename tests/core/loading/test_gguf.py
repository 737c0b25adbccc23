"""GGUF files written by tests/support/checkpoints.py, read back through open_checkpoint."""
from __future__ import annotations


import pytest
import torch

from anydev.core.loading.checkpoint import ModelLoadError, open_checkpoint
from anydev.core.config import expected_tensor_names
from checkpoints import LLAMA_TEMPLATE, write_gguf_checkpoint

gguf = pytest.importorskip("gguf")

# Mean absolute error allowed after quantization, relative to the mean absolute weight.
TOLERANCE = {"F32": 0.0, "F16": 1e-3, "BF16": 1e-2, "Q8_0": 0.01, "Q6_K": 0.03, "Q5_0": 0.05,
             "Q5_1": 0.05, "Q4_0": 0.1, "Q4_1": 0.1, "Q4_K": 0.1}
STORED_DTYPE = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
TEXTS = ["Hello world!", "", "  two spaces\n\nnewlines", "the <s> quick </s> fox", "naïve café 東京 🚀",
         "I'll pay 1234567 for THAT's", "x\r\n\r\n   y"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One file per tensor type, written on first use."""
    root, files = tmp_path_factory.mktemp("gguf"), {}

    def get(tensor_type: str, **kwargs):
        key = (tensor_type, tuple(sorted(kwargs.items())))
        if key not in files:
            files[key] = write_gguf_checkpoint(root / f"model-{len(files)}-{tensor_type}.gguf", tensor_type, **kwargs)
        return files[key]
    return get


def single_line_error(call) -> str:
    with pytest.raises(ModelLoadError) as info:
        call()
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("tensor_type", list(TOLERANCE))
def test_round_trip_names_layout_and_values(written, tensor_type):
    model = written(tensor_type)
    with open_checkpoint(model.path) as ckpt:
        assert sorted(ckpt.tensor_names()) == sorted(expected_tensor_names(ckpt.config))
        for name in ckpt.tensor_names():
            tensor = ckpt.load(name)
            expected_dtype = torch.float32 if tensor.dim() == 1 else STORED_DTYPE.get(tensor_type, torch.float32)
            assert tensor.dtype == expected_dtype, name
            # Exactly the stored (dequantized) weights, in HF layout: q/k un-permuted, shapes [out, in].
            assert torch.equal(tensor.float(), model.state_dict[name]), name
            original = model.original[name]
            error = (tensor.float() - original).abs().mean() / original.abs().mean()
            assert error <= TOLERANCE[tensor_type], (name, float(error))


@pytest.mark.parametrize("tensor_type", ["F32", "Q8_0", "Q4_K"])
def test_tensors_equal_transformers_gguf_loader(written, tensor_type):
    """An independent reading of the same file: transformers' GGUF loader (its own un-permute)."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    model = written(tensor_type)
    parsed = load_gguf_checkpoint(str(model.path))
    target = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**parsed["config"]))
    reference = load_gguf_checkpoint(str(model.path), return_tensors=True, model_to_load=target)["tensors"]
    with open_checkpoint(model.path) as ckpt:
        assert set(ckpt.tensor_names()) == set(reference)
        for name in ckpt.tensor_names():
            assert torch.equal(ckpt.load(name), reference[name]), name


def test_q_and_k_are_unpermuted(written):
    """Without the un-permute, q/k rows would come back interleaved: far from the HF weights."""
    model = written("F32")
    with open_checkpoint(model.path) as ckpt:
        q = ckpt.load("model.layers.0.self_attn.q_proj.weight")
        k = ckpt.load("model.layers.1.self_attn.k_proj.weight")
    assert torch.equal(q, model.original["model.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(k, model.original["model.layers.1.self_attn.k_proj.weight"])
    raw = gguf.GGUFReader(model.path)
    stored_q = next(t for t in raw.tensors if t.name == "blk.0.attn_q.weight").data
    assert not torch.equal(torch.from_numpy(stored_q.copy()), q)


def test_config_from_metadata(written):
    model = written("Q8_0")
    reference = model.hf_config
    with open_checkpoint(model.path) as ckpt:
        config = ckpt.config
    assert config.architecture == "llama"
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "max_position_embeddings", "head_dim"):
        assert getattr(config, field) == getattr(reference, field), field
    assert config.rms_norm_eps == pytest.approx(reference.rms_norm_eps)
    assert config.rope_theta == reference.rope_parameters["rope_theta"]
    assert config.rope_scaling is None and config.attention_bias is False
    assert config.tie_word_embeddings is False
    assert config.bos_token_id == reference.bos_token_id and config.eos_token_ids == [reference.eos_token_id]


def test_missing_output_tensor_means_tied_embeddings(written):
    model = written("F16", tied=True)
    with open_checkpoint(model.path) as ckpt:
        assert ckpt.config.tie_word_embeddings
        assert "lm_head.weight" not in ckpt.tensor_names()


def test_llama3_rope_scaling_from_rope_freqs(tmp_path):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    model = write_gguf_checkpoint(tmp_path / "llama3.gguf", "F32", rope_scaling=dict(scaling),
                                  max_position_embeddings=16384, rope_theta=500000.0)
    with open_checkpoint(model.path) as ckpt:
        assert ckpt.config.rope_scaling == scaling
        assert ckpt.config.rope_theta == 500000.0
        assert "rope_freqs.weight" not in ckpt.tensor_names()


def test_unrecognised_rope_freqs_is_an_error(tmp_path):
    """high_freq_factor 8 (not Llama 3's 4) changes the factor of a mid frequency: not recognised."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 8.0,
               "original_max_position_embeddings": 8192}
    model = write_gguf_checkpoint(tmp_path / "odd.gguf", "F32", rope_scaling=scaling, max_position_embeddings=16384,
                                  rope_theta=500000.0)
    assert "rope_freqs" in single_line_error(lambda: open_checkpoint(model.path))


def test_qwen2_architecture_keeps_q_k_rows_and_biases(written):
    model = written("F32", arch="qwen2")
    with open_checkpoint(model.path) as ckpt:
        assert ckpt.config.architecture == "qwen2" and ckpt.config.attention_bias
        assert sorted(ckpt.tensor_names()) == sorted(expected_tensor_names(ckpt.config))
        for name in ckpt.tensor_names():
            assert torch.equal(ckpt.load(name), model.original[name]), name


# ----------------------------------------------------------------------------------------- tokenizer
def test_bpe_tokenizer_special_tokens_and_chat_template_from_metadata(written):
    model = written("Q4_0")
    with open_checkpoint(model.path) as ckpt:
        tokenizer = ckpt.tokenizer
    bos, eos = model.tokenizer.token_to_id("<s>"), model.tokenizer.token_to_id("</s>")
    assert tokenizer.bos_token_id == bos and tokenizer.eos_token_ids == [eos]
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert ids == [bos] + model.tokenizer.encode(text, add_special_tokens=False).ids, text
        assert tokenizer.decode(ids[1:], skip_special_tokens=False) == text
    assert tokenizer.decode([bos, eos]) == ""
    assert tokenizer.encode("a </s>", add_special_tokens=False)[-1] == eos   # control tokens stay whole
    assert tokenizer.chat_template == LLAMA_TEMPLATE
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == "<s>[INST] hi [/INST]"


@pytest.mark.parametrize("tokenizer_model, pre_tokenizer",
                         [("gpt2", "default"), ("gpt2", "llama-bpe"), ("gpt2", "qwen2"), ("llama", None)])
def test_token_ids_equal_transformers_gguf_tokenizer(tmp_path, tokenizer_model, pre_tokenizer):
    transformers = pytest.importorskip("transformers")
    model = write_gguf_checkpoint(tmp_path / "tok.gguf", "F16", tokenizer_model=tokenizer_model,
                                  pre_tokenizer=pre_tokenizer)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="tok.gguf")
    with open_checkpoint(model.path) as ckpt:
        tokenizer = ckpt.tokenizer
    assert tokenizer.bos_token_id == reference.bos_token_id
    assert reference.eos_token_id in tokenizer.eos_token_ids
    for text in TEXTS:
        for special in (True, False):
            ids = tokenizer.encode(text, add_special_tokens=special)
            assert ids == reference(text, add_special_tokens=special)["input_ids"], (text, special)
        assert tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=True)
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "bye"}]
    assert tokenizer.apply_chat_template(conversation) == reference.apply_chat_template(
        conversation, tokenize=False, add_generation_prompt=True)


# --------------------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("damage", ["bad magic", "bad version"])
def test_corrupt_header_names_the_file(written, tmp_path, damage):
    data = written("F32").path.read_bytes()
    damaged = {"bad magic": b"GGML" + data[4:],
               "bad version": data[:4] + (99).to_bytes(4, "little") + data[8:]}[damage]
    path = tmp_path / "broken.gguf"
    path.write_bytes(damaged)
    message = single_line_error(lambda: open_checkpoint(path))
    assert "broken.gguf" in message and "corrupt GGUF" in message


def test_unsupported_gguf_architecture_is_named(tmp_path):
    path = tmp_path / "falcon.gguf"
    writer = gguf.GGUFWriter(path, "falcon")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b"])
    writer.add_token_merges(["a b"])
    writer.add_tensor("token_embd.weight", torch.zeros(2, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    message = single_line_error(lambda: open_checkpoint(path))
    assert "falcon" in message and "llama" in message


def test_empty_gguf_file(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    assert "empty.gguf" in single_line_error(lambda: open_checkpoint(path))


def test_merge_outside_the_vocabulary_is_refused(tmp_path):
    path = tmp_path / "badmerge.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b"])
    writer.add_token_merges(["a b"])      # "ab" is not a token
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert "'a b'" in single_line_error(lambda: open_checkpoint(path))


def test_split_gguf_is_refused(tmp_path):
    path = tmp_path / "model-00001-of-00002.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_uint16("split.count", 2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert "split GGUF" in single_line_error(lambda: open_checkpoint(path))


@pytest.mark.parametrize("tensor_type", ["F32", "F16", "BF16", "Q8_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("tp", [2, 4])
def test_a_rank_slice_decodes_only_its_part_and_equals_the_whole_tensor_cut(written, tensor_type, tp):
    """Per-shard decoding (rows; along a row, whole quantization blocks; a cut inside a block decodes
    whole rows then narrows) gives exactly the slice of the fully decoded, un-permuted tensor."""
    from anydev.core.models.sharding import rank_shard, slice_of
    model = written(tensor_type)
    with open_checkpoint(model.path) as ckpt:
        for rank in range(tp):
            shard = rank_shard(ckpt.config, tp, rank)
            for name in ckpt.tensor_names():
                cut = slice_of(name, shard)
                whole = ckpt.load(name)
                piece = ckpt.tensor_slice(name, cut)
                assert piece.full_shape == tuple(whole.shape), name
                expected = whole if cut is None else whole.narrow(*cut)
                out = torch.empty(expected.numel() * expected.element_size(), dtype=torch.uint8)
                piece.read_rows(0, piece.shape[0], out.numpy())
                assert piece.dtype == whole.dtype and piece.shape == tuple(expected.shape), name
                assert torch.equal(out.view(whole.dtype).view(expected.shape), expected), (rank, name)


def test_per_shard_dequantization_touches_only_the_shards_blocks(written, monkeypatch):
    """At tp=2 a Q8_0 rank dequantizes half of each split tensor's blocks, a block of rows at a time."""
    from anydev.core.loading import gguf_loader
    from anydev.core.models.sharding import rank_shard, slice_of
    model = written("Q8_0")
    calls = []
    real = gguf_loader.dequantize
    monkeypatch.setattr(gguf_loader, "dequantize", lambda data, kind: calls.append(data.size) or real(data, kind))
    with open_checkpoint(model.path) as ckpt:
        for name in ("model.layers.0.mlp.down_proj.weight", "model.layers.1.self_attn.q_proj.weight"):
            whole = ckpt.load(name)            # split along rows' blocks; split by rows (and permuted)
            whole_bytes = sum(calls)
            calls.clear()
            cut = slice_of(name, rank_shard(ckpt.config, 2, 1))
            piece = ckpt.tensor_slice(name, cut)
            assert calls == []                 # nothing decoded until rows are read
            rows, row_bytes = piece.shape[0], piece.shape[1] * 4
            out = torch.empty(rows * row_bytes, dtype=torch.uint8)
            for first in range(0, rows, 5):    # blocks of 5 rows, as a small staging buffer would
                count = min(5, rows - first)
                piece.read_rows(first, count, out[first * row_bytes:(first + count) * row_bytes].numpy())
            assert sum(calls) == whole_bytes // 2 and max(calls) < whole_bytes // 2, name
            assert torch.equal(out.view(torch.float32).view(piece.shape), whole.narrow(*cut)), name
            calls.clear()


@pytest.mark.parametrize("tensor_type", ["Q8_0", "Q4_K"])
def test_tensor_parallel_gguf_gives_the_tp1_tokens(written, tensor_type):
    from anydev.core import EngineConfig, InferEngine, SamplingParams
    model = written(tensor_type)
    prompts = [[5, 9, 33, 70, 12], [101, 7]]
    results = []
    for tp in (1, 2, 4):
        with InferEngine(model.path, EngineConfig(tp=tp, block_size=8, num_blocks=16)) as engine:
            results.append([o.token_ids for o in engine.generate_ids(prompts, SamplingParams(max_new_tokens=12))])
    assert results[0] == results[1] == results[2]
