"""Teacher-forced scoring through the engine (``LlamaRank.token_logits``, benchmarks/perplexity.py) on
the cpu: the log-likelihood of a text equals transformers' for the same checkpoint, a GGUF file written
by benchmarks/tiny_llama.py from a checkpoint scores as its dequantized weights do, and the grammar
text is the same for the same seed."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from anydev.core import EngineConfig, InferEngine
from checkpoints import write_hf_checkpoint

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
transformers = pytest.importorskip("transformers")


def load(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_engines_teacher_forced_log_likelihood_equals_transformers(tmp_path):
    perplexity = load("perplexity")
    model = write_hf_checkpoint(tmp_path / "hf")
    ids = torch.randint(2, 320, (70,), generator=torch.Generator().manual_seed(0)).tolist()
    passes = perplexity.windows(ids, 32)          # 3 passes; the last one shorter, over a partial KV block
    assert [len(p) for p in passes] == [33, 33, 6] and sum(len(p) - 1 for p in passes) == len(ids) - 1
    config = EngineConfig(block_size=16, num_blocks=4, max_model_len=64, use_graphs=False)
    with InferEngine(model, config) as engine:
        got = perplexity.engine_nll(engine, passes, block_size=16)
    want = perplexity.reference_nll(str(model), passes)
    assert got == pytest.approx(want, rel=1e-4)


def test_a_gguf_file_of_a_checkpoint_scores_as_its_dequantized_weights(tmp_path):
    """tiny_llama.save_gguf writes llama.cpp's q/k row order and the loader undoes it: the Q8_0 file's
    blocks kept and dequantized give one log-likelihood, close to the float checkpoint's."""
    tiny, perplexity = load("tiny_llama"), load("perplexity")
    model = tmp_path / "tiny"
    tiny.train(model, steps=2, seq_len=16, batch=2)
    tiny.save_gguf(model, model / "q8_0.gguf", "Q8_0")
    passes = perplexity.windows(tiny.token_ids(tiny.corpus(tiny.HELD_OUT_SEED, 6)), 32)
    config = dict(block_size=16, num_blocks=4, max_model_len=64, use_graphs=False)
    scores = {}
    for path, quantization in ((model, None), (model / "q8_0.gguf", None), (model / "q8_0.gguf", "dequantize")):
        with InferEngine(path, EngineConfig(quantization=quantization, **config)) as engine:
            scores[path.name, quantization] = perplexity.engine_nll(engine, passes, block_size=16)
    kept, dequantized = scores["q8_0.gguf", None], scores["q8_0.gguf", "dequantize"]
    assert kept == pytest.approx(dequantized, rel=1e-4)
    assert kept == pytest.approx(scores["tiny", None], rel=2e-2)   # a Q8_0 round trip, not a different model


def test_the_text_is_fixed_by_its_seed():
    tiny = load("tiny_llama")
    assert tiny.corpus(1, 50) == tiny.corpus(1, 50) != tiny.corpus(0, 50)
    assert tiny.corpus(1, 50).count(".") >= 50
