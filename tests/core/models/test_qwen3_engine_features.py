"""Qwen3-MoE with the engine's features on: prefix caching and chunked prefill together, and the cpu
backend's recording device graphs (decode graphs and the piecewise graphs of prompt steps) give the
tokens transformers gives on the same random weights."""
from __future__ import annotations

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from checkpoints import write_hf_checkpoint

transformers = pytest.importorskip("transformers")

NEW_TOKENS = 6
SHARED = list(range(3, 27))                                   # 24 tokens: 3 blocks of 8
PROMPTS = [SHARED + [40, 41], SHARED + [50], [60, 61, 62]]


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory):
    path = write_hf_checkpoint(tmp_path_factory.mktemp("moe") / "qwen3_moe", arch="qwen3_moe")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    expected = []
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                              eos_token_id=[], pad_token_id=0)
        expected.append(out[0, len(prompt):].tolist())
    return path, expected


SAMPLING = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)


def test_prefix_caching_and_chunked_prefill(moe_model):
    """The first prompt fills the cache; the second hits its 3 shared blocks; prompts go in chunks of
    at most 10 tokens beside the decodes."""
    path, expected = moe_model
    config = EngineConfig(block_size=8, max_num_batched_tokens=10, enable_chunked_prefill=True,
                          enable_prefix_caching=True, use_graphs=False)
    with InferEngine(path, config) as engine:
        first = engine.generate_ids(PROMPTS[:1], SAMPLING)
        rest = engine.generate_ids(PROMPTS[1:], SAMPLING)
        assert engine.block_manager.hit_rate > 0
    assert [o.token_ids for o in first + rest] == expected


def test_device_graphs(moe_model, cpu_with_graphs):
    path, expected = moe_model
    with InferEngine(path, EngineConfig(block_size=8, piecewise_max_tokens=64)) as engine:
        assert engine.uses_graphs and engine.backend is cpu_with_graphs
        outputs = engine.generate_ids(PROMPTS, SAMPLING)
        assert engine.last_stats.decode_steps > 0
    assert [o.token_ids for o in outputs] == expected
