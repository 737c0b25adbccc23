"""Quantized projection weights through the engine (cpu, float32, the reference kernels): GGUF blocks
kept as stored on each rank give the same greedy tokens as the same file dequantized to float32, at
TP=1, TP=2 (rows and columns of blocks sharded) and PP=2; each rank says its weights' formats and
bytes; int8/fp8 quantize a float checkpoint per output channel while it loads, exactly as quantizing
the float weights first would; an HF fp8 checkpoint quantized per channel loads as stored (fp8 rows
and their scales) and gives the tokens of its weights dequantized."""
from __future__ import annotations

import pytest
import torch
from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import Checkpoint, demo_checkpoint
from anydev.core.loading.tensor_store import InMemoryStore
from anydev.core.models.quantized import QuantizedWeight
from anydev.plugin_api.weight_formats import dequantize, quantize_per_channel, row_bytes
from checkpoints import write_gguf_checkpoint

pytest.importorskip("transformers")     # write_gguf_checkpoint builds the model with transformers

PROMPTS = [[5, 9, 13], [7] * 11, list(range(3, 30))]
GREEDY = SamplingParams(max_new_tokens=10)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class Run:
    """One engine's greedy tokens of ``prompts``, its ranks' weight lines, rank 0's projections: their
    formats (None: a float tensor) and bytes, and its token embedding's format and bytes; with
    ``spy``, the weights rank 0's ``quantized_linear`` and ``quantized_embedding`` ran (their data pointers)."""

    def __init__(self, model, spy: bool = False, prompts=PROMPTS, **config):
        with InferEngine(model, EngineConfig(block_size=8, max_model_len=64, **config)) as engine:
            self.quantized_linear_weights, self.embedding_lookups = set(), set()
            if spy:
                engine.workers[0].model.kernels = QuantizedKernelSpy(engine.workers[0].model.kernels,
                                                                     self.quantized_linear_weights, self.embedding_lookups)
            self.tokens = [out.token_ids for out in engine.generate_ids(prompts, GREEDY)]
            self.described = engine.weight_descriptions
            self.decode_steps = engine.last_stats.decode_steps
            self.graph_captures = [(w.graphs.captures if w.graphs else 0, w.pieces.captures if w.pieces else 0)
                                   for w in engine.workers]
            held = engine.workers[0].weights.tensors
            projections = {name: t for name, t in held.items() if name.rsplit(".", 2)[-2] in PROJECTIONS}
            self.formats = {name: t.weight_format if isinstance(t, QuantizedWeight) else None
                            for name, t in projections.items()}
            self.projection_bytes = sum(t.nbytes for t in projections.values())
            embedding = held["model.embed_tokens.weight"]
            self.embedding_format = embedding.weight_format if isinstance(embedding, QuantizedWeight) else None
            self.embedding_bytes = embedding.nbytes
            self.embedding_pointer = getattr(embedding, "data", embedding).data_ptr()


class QuantizedKernelSpy:
    """A rank's kernel set that notes the data pointer of each weight ``quantized_linear`` runs and of
    each table ``quantized_embedding`` looks rows up in."""

    def __init__(self, kernels, linear_weights: set, embedding_tables: set):
        self._kernels, self._linear, self._embedding = kernels, linear_weights, embedding_tables

    def __getattr__(self, name):
        return getattr(self._kernels, name)

    def quantized_linear(self, x, weight, scales, weight_format):
        self._linear.add(weight.data_ptr())
        return self._kernels.quantized_linear(x, weight, scales, weight_format)

    def quantized_embedding(self, ids, weight, scales, weight_format, hidden, dtype):
        self._embedding.add(weight.data_ptr())
        return self._kernels.quantized_embedding(ids, weight, scales, weight_format, hidden, dtype)


@pytest.fixture(scope="module", params=["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"])
def gguf_file(request, tmp_path_factory):
    return request.param, write_gguf_checkpoint(tmp_path_factory.mktemp("q") / f"{request.param}.gguf", request.param).path


def test_gguf_blocks_kept_quantized_give_the_dequantized_files_greedy_tokens(gguf_file):
    tensor_type, path = gguf_file
    kept, reference = Run(path), Run(path, quantization="dequantize")
    assert kept.tokens == reference.tokens and all(reference.tokens)
    fmt = tensor_type.lower()
    assert set(reference.formats.values()) == {None} and set(kept.formats.values()) == {fmt}
    assert kept.described[0].startswith(f"rank 0 weights: {fmt} ") and "float32 " in kept.described[0], kept.described
    ratio = kept.projection_bytes / reference.projection_bytes      # against float32; bf16 is half of that
    assert ratio * 2 <= {"q8_0": 34 / 64, "q6_k": 210 / 512}.get(fmt, 0.32), ratio


def embedding_shape(path) -> tuple[int, int]:
    """(vocabulary, hidden) of the model in ``path``."""
    from anydev.core.loading.checkpoint import open_checkpoint

    with open_checkpoint(path) as checkpoint:
        return checkpoint.config.vocab_size, checkpoint.config.hidden_size


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("tensor_type", ["Q8_0", "Q4_K"])
def test_the_token_embedding_stays_in_its_gguf_blocks(tmp_path, tensor_type, tied):
    """The embedding is looked up from its blocks by the kernel set's ``quantized_embedding`` (the rows
    it reads dequantized on the device) and
    holds its blocks' bytes on the device, not 4 (float32) bytes a value; "dequantize" gives the
    reference. Tied (no output.weight), the head runs ``quantized_linear`` on the embedding's blocks,
    and at TP=2 each rank's half of them (the vocabulary split) gives the same tokens (a tied model
    tends to repeat its input's last token: some prompts end in the upper half of the 300 tokens)."""
    path = write_gguf_checkpoint(tmp_path / f"{tensor_type}.gguf", tensor_type, tied=tied).path
    prompts = PROMPTS + [[160, 220, 290], list(range(140, 170))]
    kept, reference = Run(path, spy=True, prompts=prompts), Run(path, quantization="dequantize", prompts=prompts)
    assert kept.tokens == reference.tokens and all(reference.tokens)
    fmt = tensor_type.lower()
    assert (kept.embedding_format, reference.embedding_format) == (fmt, None)
    vocab, hidden = embedding_shape(path)
    assert kept.embedding_bytes == vocab * row_bytes(fmt, hidden)        # its blocks
    assert reference.embedding_bytes == vocab * hidden * 4               # float32
    assert (kept.embedding_pointer in kept.quantized_linear_weights) == tied
    assert kept.embedding_lookups == {kept.embedding_pointer}          # looked up by quantized_embedding (1.9)
    if tied:
        split = Run(path, tp=2, prompts=prompts)
        assert split.tokens == kept.tokens and all(f"{fmt} " in line for line in split.described)


def test_a_quantized_embedding_runs_inside_the_decode_and_piecewise_graphs(tmp_path, cpu_with_graphs):
    """The cpu backend's recording graphs refuse a host read inside a capture: the lookup of the
    embedding's blocks is captured (decode steps and the piecewise prefill's first piece), and the
    replays give the eager tokens."""
    path = write_gguf_checkpoint(tmp_path / "Q4_K.gguf", "Q4_K").path
    graphs, eager = Run(path, max_num_seqs=4), Run(path, use_graphs=False)
    decode, pieces = graphs.graph_captures[0]
    assert graphs.embedding_format == "q4_k" and decode > 0 and pieces > 0 and graphs.decode_steps > 0
    assert eager.graph_captures == [(0, 0)]
    assert graphs.tokens == eager.tokens and all(eager.tokens)


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2)], ids=["tp2", "pp2"])
def test_gguf_blocks_kept_quantized_are_sharded_by_rows_columns_and_layers(gguf_file, layout):
    """TP=2 splits q/k/v/gate/up by rows and o/down by columns, in whole blocks (a Q4_K/Q6_K block of
    256 values is wider than half of o_proj's 256 inputs, so that one stays float32 on the ranks);
    PP=2 gives each stage its layers' blocks."""
    tensor_type, path = gguf_file
    whole, split = Run(path), Run(path, **layout)
    assert split.tokens == whole.tokens
    assert len(split.described) == 2 and all(f"{tensor_type.lower()} " in line for line in split.described), split.described
    if layout.get("tp") == 2:
        o, down = (split.formats[f"model.layers.0.{name}.weight"] for name in ("self_attn.o_proj", "mlp.down_proj"))
        assert down == tensor_type.lower()                 # 512 inputs: 256 a rank, whole blocks
        assert o == (None if tensor_type in ("Q4_K", "Q6_K") else tensor_type.lower())



SPLIT_ROWS = {"q8_0": "q8_0_split", "q6_k": "q6_k_split"}


@pytest.mark.parametrize("quantization,tp,layouts", [(None, 1, None), ("dequantize", 1, None), ("int8", 1, None),
                                                     (None, 2, None), (None, 1, SPLIT_ROWS), (None, 2, SPLIT_ROWS)])
def test_gguf_blocks_are_read_as_stored_and_never_decoded_on_the_host(gguf_file, quantization, tp, layouts, monkeypatch):
    """Every tensor a GGUF file stores in blocks is copied to the device as stored: kept (the
    projections and the token embedding), dequantized there (every tensor under "dequantize"; the
    embedding under "int8"; at
    tp=2, a K-quant o_proj whose half of a row splits its 256-value blocks, read as the covering blocks)
    or quantized there ("int8"). The gguf package's host decoder is never called, and each float
    weight, and each kept weight's blocks, equal the package's decoding of the file (q/k rows
    un-permuted: the kept ones on the device, whole heads a block), in blocks of rows small enough to
    split every tensor, read by two threads (rank 1's part at tp=2). With a split-row layout for
    q8_0 and q6_k (``layouts``), their kept projections hold split rows of the same values."""
    from anydev.core.config import expected_tensor_names
    from anydev.core.loading import gguf_loader
    from anydev.core.loading.checkpoint import open_checkpoint
    from anydev.core.loading.weights import RankWeights, projection_formats
    from anydev.core.models.sharding import rank_shard, slice_of
    from anydev.plugin_api import load_backend

    def refuse(*args):
        raise AssertionError("a GGUF block format was decoded on the host")

    with open_checkpoint(gguf_file[1]) as checkpoint:
        decoded = {name: checkpoint.load(name).float() for name in checkpoint.tensor_names()}   # by gguf
        monkeypatch.setattr(gguf_loader, "dequantize", refuse)
        device = load_backend("cpu").device(0)
        shard = rank_shard(checkpoint.config, tp, tp - 1)
        formats = projection_formats(checkpoint, expected_tensor_names(checkpoint.config), shard, quantization, layouts)
        weights = RankWeights(device, checkpoint.config, shard, torch.float32, formats=formats)
        if layouts and gguf_file[0] in ("Q8_0", "Q6_K"):
            fmt = gguf_file[0].lower()
            assert formats["model.layers.0.mlp.down_proj.weight"] == f"{fmt}_split"
            assert formats["model.embed_tokens.weight"] == fmt
        stream = device.create_stream()
        try:
            weights.load(checkpoint, stream, lambda: None, lambda n: None, staging_bytes=1 << 16, read_threads=2)
            stream.synchronize()
            floats = {name: t for name, t in weights.tensors.items() if not isinstance(t, QuantizedWeight)}
            for name, tensor in weights.tensors.items():
                cut = slice_of(name, shard)
                want = decoded[name] if cut is None else decoded[name].narrow(*cut)
                if isinstance(tensor, QuantizedWeight):
                    if tensor.scales is None:        # blocks kept as stored (q/k rows un-permuted on the device)
                        assert torch.equal(dequantize(tensor.data, None, tensor.weight_format, tensor.in_features), want), name
                else:
                    assert torch.equal(tensor, want), name
            assert ("model.embed_tokens.weight" in floats) == (quantization is not None)   # kept as stored
            assert (len(floats) == len(decoded)) == (quantization == "dequantize")
            if tp == 2 and gguf_file[0] in ("Q4_K", "Q6_K"):
                assert "model.layers.0.self_attn.o_proj.weight" in floats       # split blocks: dequantized
            if quantization == "int8":
                q_proj = weights.tensors["model.layers.0.self_attn.q_proj.weight"]
                want = quantize_per_channel(decoded["model.layers.0.self_attn.q_proj.weight"], "int8")
                assert torch.equal(q_proj.data, want[0]) and torch.equal(q_proj.scales, want[1])
        finally:
            weights.close()
            stream.close()

@pytest.mark.parametrize("tensor_type", ["Q8_0", "Q6_K"])
def test_gguf_projections_load_in_split_rows_where_the_kernels_take_them(tmp_path, monkeypatch, tensor_type):
    """Where the kernel set's quantized_linear names a split-row format, the projections in its block
    format are copied as stored and split on the device (the embedding stays in its blocks): the same
    bytes, and the blocks' greedy tokens at TP=1 and TP=2 (rows sharded; o_proj's columns too where
    whole blocks allow). A split skipped, or one row's split misplaced, gives other tokens."""
    from anydev.core.rank import rank_worker

    fmt = tensor_type.lower()
    path = write_gguf_checkpoint(tmp_path / f"{tensor_type}.gguf", tensor_type).path
    blocks = Run(path)
    monkeypatch.setattr(rank_worker, "split_layouts", lambda kernels, dtype: SPLIT_ROWS)
    for layout in (dict(), dict(tp=2)):
        split = Run(path, **layout)
        assert split.tokens == blocks.tokens and all(split.tokens)
        assert set(split.formats.values()) - {None} == {f"{fmt}_split"} and split.embedding_format == fmt
        assert all(f"{fmt}_split " in line for line in split.described), split.described
    assert Run(path).projection_bytes == blocks.projection_bytes


def test_split_layouts_are_those_the_kernel_sets_quantized_linear_names():
    from anydev.core.loading.weights import split_layouts
    from anydev.plugin_api.kernels import KernelSet

    assert split_layouts(KernelSet.reference(), torch.bfloat16) == {}
    pytest.importorskip("triton")
    from anydev.backends.triton_kernels import kernels

    assert split_layouts(KernelSet("triton", kernels()), torch.bfloat16) == SPLIT_ROWS


def round_trip_checkpoint(weight_format: str) -> Checkpoint:
    """The demo model with every projection (and the lm_head) replaced by its per-channel round trip."""
    demo = demo_checkpoint()
    tensors = {}
    for name in demo.tensor_names():
        tensor = demo.load(name)
        if tensor.dim() == 2 and (name.rsplit(".", 2)[-2] in PROJECTIONS or name == "lm_head.weight"):
            tensor = dequantize(*quantize_per_channel(tensor, weight_format), weight_format, tensor.shape[1])
        tensors[name] = tensor
    return Checkpoint(demo.config, demo.tokenizer, InMemoryStore(tensors), "demo, round trip")


@pytest.mark.parametrize("quantization,weight_format", [("int8", "int8"), ("fp8", "fp8_e4m3")])
def test_quantization_while_loading_equals_quantizing_the_float_weights_first(quantization, weight_format):
    quantized, round_trip = Run(demo_checkpoint(), quantization=quantization), Run(round_trip_checkpoint(weight_format))
    assert quantized.tokens == round_trip.tokens and all(quantized.tokens)
    assert f"{weight_format} " in quantized.described[0]
    assert set(quantized.formats.values()) == {weight_format}


def test_an_unknown_quantization_is_refused_naming_the_choices():
    from anydev.core import EngineConfigError

    with pytest.raises(EngineConfigError, match="quantization 'int4' is not supported; use one of int8, fp8"):
        InferEngine(demo_checkpoint(), EngineConfig(quantization="int4"))


def write_fp8_checkpoint(directory) -> tuple:
    """An HF llama checkpoint quantized per output channel to fp8 as fbgemm_fp8 stores it (each
    projection float8 e4m3 with ``weight_scale`` [N, 1] float32), and the same model with those
    weights dequantized (float32), in ``directory``/fp8 and ``directory``/float."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from checkpoints import write_hf_checkpoint

    plain = write_hf_checkpoint(directory / "float", num_hidden_layers=2)
    fp8 = directory / "fp8"
    shutil.copytree(plain, fp8)
    tensors = load_file(plain / "model.safetensors")
    stored, dequantized = {}, {}
    for name, tensor in tensors.items():
        if name.endswith("proj.weight"):
            data, scales = quantize_per_channel(tensor, "fp8_e4m3")
            stored[name], stored[name + "_scale"] = data, scales[:, None]
            tensor = dequantize(data, scales, "fp8_e4m3", tensor.shape[1])
        stored.setdefault(name, tensor)
        dequantized[name] = tensor.contiguous()
    save_file(stored, fp8 / "model.safetensors")
    save_file(dequantized, plain / "model.safetensors")
    config = json.loads((fp8 / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}
    (fp8 / "config.json").write_text(json.dumps(config))
    return fp8, plain


@pytest.mark.parametrize("tp", [1, 2])
def test_an_hf_fp8_per_channel_checkpoint_loads_as_stored(tmp_path, tp):
    fp8, dequantized = write_fp8_checkpoint(tmp_path)
    stored, reference = Run(fp8, tp=tp), Run(dequantized, tp=tp)
    assert stored.tokens == reference.tokens and all(stored.tokens)
    assert set(stored.formats.values()) == {"fp8_e4m3"}
    assert all("fp8_e4m3 " in line for line in stored.described) and len(stored.described) == tp


def test_an_hf_fp8_checkpoint_refuses_another_quantization(tmp_path):
    from anydev.core import EngineInitError

    fp8, _ = write_fp8_checkpoint(tmp_path)
    with pytest.raises(EngineInitError, match="fp8_e4m3 per channel; quantization 'int8' cannot apply"):
        Run(fp8, quantization="int8")
