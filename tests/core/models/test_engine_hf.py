"""Greedy tokens of the engine equal HF transformers' greedy tokens on the same weights (cpu, float32):
llama / mistral / qwen2 safetensors checkpoints written by the tests, tied and untied embeddings,
llama3 rope scaling, GGUF files in several tensor types; prompts of several lengths, batched."""
from __future__ import annotations

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from checkpoints import write_gguf_checkpoint, write_hf_checkpoint

transformers = pytest.importorskip("transformers")

PROMPT_LENGTHS = (1, 4, 11, 29)
NEW_TOKENS = 12
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32, "rope_theta": 50000.0}


def prompts_for(vocab_size: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab_size, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]


def hf_greedy(model, prompt: list[int], eos_ids: list[int], new_tokens: int = NEW_TOKENS) -> list[int]:
    """HF's greedy continuation of one prompt (batch 1: no padding in the reference)."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                             eos_token_id=eos_ids, pad_token_id=eos_ids[0])
    return out[0, len(prompt):].tolist()


def eos_of(checkpoint) -> list[int]:
    return sorted(set(checkpoint.config.eos_token_ids) | set(checkpoint.tokenizer.eos_token_ids))


def assert_matches_hf(engine: InferEngine, hf_model, prompts) -> None:
    eos = eos_of(engine.checkpoint)
    outputs = engine.generate_ids(prompts, SamplingParams(max_new_tokens=NEW_TOKENS))
    for prompt, out in zip(prompts, outputs):
        expected = hf_greedy(hf_model, prompt, eos)
        assert out.token_ids == expected, f"prompt of {len(prompt)} tokens"
        assert out.finish_reason == ("eos" if expected[-1] in eos else "length")


CASES = {
    "llama": dict(arch="llama"),
    "llama-tied": dict(arch="llama", tied=True),
    "llama-sharded": dict(arch="llama", sharded=True),
    "llama3-rope": dict(arch="llama", rope_parameters=LLAMA3_ROPE),
    "mistral": dict(arch="mistral"),
    "mistral-sliding-window": dict(arch="mistral", sliding_window=8),   # shorter than the longer prompts
    "qwen2-bias": dict(arch="qwen2"),
    "qwen2-tied": dict(arch="qwen2", tied=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_tokens_equal_transformers(case, tmp_path):
    directory = write_hf_checkpoint(tmp_path / case, **CASES[case])
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with InferEngine(directory, EngineConfig(block_size=4)) as engine:   # small blocks: many per sequence
        assert engine.checkpoint.config.tie_word_embeddings == CASES[case].get("tied", False)
        if "rope_parameters" in CASES[case]:
            assert engine.checkpoint.config.rope_scaling["rope_type"] == "llama3"
        assert_matches_hf(engine, hf_model, prompts_for(engine.checkpoint.config.vocab_size))


def test_text_prompts_use_the_chat_template_and_match_transformers(tmp_path):
    directory = write_hf_checkpoint(tmp_path / "chat", arch="qwen2")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with InferEngine(directory, EngineConfig()) as engine:
        tokenizer = engine.checkpoint.tokenizer
        text = "Hello world! Tensor parallel"
        templated, plain = engine.generate([text, text][:1], SamplingParams(max_new_tokens=NEW_TOKENS)), \
            engine.generate([text], SamplingParams(max_new_tokens=NEW_TOKENS), use_chat_template=False)
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        assert templated[0].prompt_token_ids == tokenizer.encode(rendered, add_special_tokens=False)
        assert plain[0].prompt_token_ids == tokenizer.encode(text)
        for out in templated + plain:
            assert out.token_ids == hf_greedy(hf_model, out.prompt_token_ids, eos_of(engine.checkpoint))
            assert out.text == tokenizer.decode(out.token_ids, skip_special_tokens=True)


@pytest.mark.parametrize("tensor_type", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"])
def test_gguf_greedy_tokens_equal_transformers_on_the_dequantized_weights(tensor_type, tmp_path):
    written = write_gguf_checkpoint(tmp_path / f"model-{tensor_type}.gguf", tensor_type)
    hf_model = transformers.AutoModelForCausalLM.from_config(written.hf_config, dtype=torch.float32).eval()
    hf_model.load_state_dict(written.state_dict)
    with InferEngine(written.path, EngineConfig(block_size=8)) as engine:
        assert_matches_hf(engine, hf_model, prompts_for(engine.checkpoint.config.vocab_size, seed=1))


def test_gguf_tied_with_llama3_rope_scaling(tmp_path):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}   # what llama.cpp's rope_freqs can be read back as
    written = write_gguf_checkpoint(tmp_path / "tied.gguf", "Q8_0", tied=True, rope_scaling=scaling,
                                    max_position_embeddings=16384, rope_theta=500000.0)
    hf_model = transformers.AutoModelForCausalLM.from_config(written.hf_config, dtype=torch.float32).eval()
    hf_model.load_state_dict(written.state_dict, strict=False)   # tied: lm_head is the embedding
    with InferEngine(written.path, EngineConfig(block_size=8)) as engine:
        assert engine.checkpoint.config.rope_scaling["rope_type"] == "llama3"
        assert_matches_hf(engine, hf_model, prompts_for(engine.checkpoint.config.vocab_size, seed=2))
