"""Qwen3 and Qwen3-MoE: random-weight tiny models built by transformers' own classes
(Qwen3ForCausalLM, Qwen3MoeForCausalLM: 2 layers, hidden 64, heads of 32 > hidden / heads; the MoE
4 experts, top 2, renormalised) give HF's greedy tokens through anydev at TP 1 and 2 and PP 2, from
HF safetensors and from GGUF files written as llama.cpp's converter would (``qwen3``/``qwen3moe``;
the GGUF reference is HF on the dequantized weights)."""
from __future__ import annotations

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import open_checkpoint
from checkpoints import write_gguf_checkpoint, write_hf_checkpoint

transformers = pytest.importorskip("transformers")

NEW_TOKENS = 8
PROMPTS = [[5, 9, 20, 33, 40], [7, 8], list(range(3, 30))]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(path, HF greedy tokens per prompt) per (arch, source), written and computed on first use."""
    root, cache = tmp_path_factory.mktemp("qwen3"), {}

    def get(arch: str, source: str):
        if (arch, source) not in cache:
            if source == "hf":
                path = write_hf_checkpoint(root / arch, arch=arch)
                hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            else:
                written = write_gguf_checkpoint(root / f"{arch}-{source}.gguf", source, arch=arch)
                hf = transformers.AutoModelForCausalLM.from_config(written.hf_config, dtype=torch.float32).eval()
                hf.load_state_dict(written.state_dict)
                path = written.path
            expected = []
            for prompt in PROMPTS:
                ids = torch.tensor([prompt])
                with torch.no_grad():
                    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                      do_sample=False, eos_token_id=[], pad_token_id=0)
                expected.append(out[0, len(prompt):].tolist())
            cache[arch, source] = path, expected
        return cache[arch, source]
    return get


CASES = [("qwen3", "hf", 1, 1), ("qwen3", "hf", 2, 1), ("qwen3", "hf", 1, 2), ("qwen3", "Q8_0", 1, 1),
         ("qwen3", "F32", 2, 1),
         ("qwen3_moe", "hf", 1, 1), ("qwen3_moe", "hf", 2, 1), ("qwen3_moe", "hf", 1, 2),
         ("qwen3_moe", "Q8_0", 1, 1), ("qwen3_moe", "Q8_0", 2, 1), ("qwen3_moe", "F32", 1, 2)]


@pytest.mark.parametrize("arch, source, tp, pp", CASES, ids=[f"{a}-{s}-tp{t}-pp{p}" for a, s, t, p in CASES])
def test_greedy_tokens_equal_transformers(models, arch, source, tp, pp):
    path, expected = models(arch, source)
    with InferEngine(path, EngineConfig(block_size=4, tp=tp, pp=pp)) as engine:
        assert engine.checkpoint.config.architecture == arch
        outputs = engine.generate_ids(PROMPTS, SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [out.token_ids for out in outputs] == expected


@pytest.mark.parametrize("source", ["hf", "Q8_0"])
def test_moe_config_from_hf_and_gguf(models, source):
    with open_checkpoint(models("qwen3_moe", source)[0]) as checkpoint:
        config = checkpoint.config
        names = checkpoint.tensor_names()
    assert (config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size) == (4, 2, 32)
    assert config.norm_topk_prob is True and config.moe_layers == (0, 1) and config.head_dim == 32
    assert "model.layers.1.mlp.experts.3.down_proj.weight" in names and "model.layers.0.self_attn.q_norm.weight" in names


def test_gguf_stacked_experts_read_as_hf_per_expert_tensors(tmp_path):
    """llama.cpp's ffn_*_exps [E, rows, cols] come back as each expert's HF tensor, whole and as a
    rank's part (the experts' split under TP), equal to the weights as stored (dequantized)."""
    written = write_gguf_checkpoint(tmp_path / "moe.gguf", "Q8_0", arch="qwen3_moe")
    gate_up = written.state_dict["model.layers.1.mlp.experts.gate_up_proj"]      # [E, 2 x 32, 64]
    down = written.state_dict["model.layers.1.mlp.experts.down_proj"]            # [E, 64, 32]
    with open_checkpoint(written.path) as checkpoint:
        for e in range(4):
            p = f"model.layers.1.mlp.experts.{e}."
            assert torch.equal(checkpoint.load(p + "gate_proj.weight"), gate_up[e, :32])
            assert torch.equal(checkpoint.load(p + "up_proj.weight"), gate_up[e, 32:])
            assert torch.equal(checkpoint.load(p + "down_proj.weight"), down[e])
            part = checkpoint.tensor_slice(p + "up_proj.weight", (0, 16, 16))      # rank 1 of 2
            rows = torch.empty(part.shape, dtype=part.dtype)
            part.read_rows(0, 16, rows.view(-1).view(torch.uint8).numpy())
            assert torch.equal(rows, gate_up[e, 48:])
