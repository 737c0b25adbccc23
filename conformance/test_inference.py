"""Inference: the demo model's greedy tokens on this backend equal the cpu reference (one rank,
float32); TP=N equals TP=1; a batch of prompts of different lengths equals each prompt alone; a tiny
Qwen3-MoE at TP=N (every rank holds every expert's slice, the partial sums all-reduced) equals the cpu
backend at one rank.

All runs use float32, so the comparison is about the backend (memory, streams, collectives, the
torch bridge), not about rounding to bfloat16. On the cpu backend the first check compares two
separate engines on the same backend; the engine's unit tests compare the cpu path with HF
transformers.
"""
from __future__ import annotations

from anydev.conformance.engine_support import (
    cpu_reference, engine_config, engine_ranks, greedy_tokens, moe_model, prompt_ids,
)
from anydev.conformance.support import require_torch_bridge


def mismatch(got: list[list[int]], expected: list[list[int]]) -> str:
    for i, (g, e) in enumerate(zip(got, expected)):
        if list(g) != list(e):
            at = next((k for k, (a, b) in enumerate(zip(g, e)) if a != b), min(len(g), len(e)))
            return f"prompt {i} (length {len(prompt_ids()[i])}) differs at generated token {at}: {list(g)} vs {list(e)}"
    return "" if len(got) == len(expected) else f"{len(got)} outputs for {len(expected)} prompts"


def test_greedy_tokens_equal_the_cpu_reference(backend):
    require_torch_bridge(backend)
    got = greedy_tokens(engine_config(backend, 1))
    expected = [list(t) for t in cpu_reference()]
    assert all(expected), "the cpu reference generated nothing"
    assert got == expected, mismatch(got, expected)


def test_tensor_parallel_equals_one_rank(backend, request):
    tp = engine_ranks(backend, request, minimum=2)
    one = greedy_tokens(engine_config(backend, 1))
    many = greedy_tokens(engine_config(backend, tp))
    assert many == one, f"TP={tp} vs TP=1: " + mismatch(many, one)


def test_batch_of_different_lengths_equals_each_prompt_alone(backend, request):
    tp = engine_ranks(backend, request)
    prompts = prompt_ids()
    assert len({len(p) for p in prompts}) == len(prompts), "the prompts should differ in length"
    batched = greedy_tokens(engine_config(backend, tp), prompts)
    alone = [greedy_tokens(engine_config(backend, tp), [p])[0] for p in prompts]
    assert batched == alone, "batched vs one at a time: " + mismatch(batched, alone)


def test_a_moe_model_at_tensor_parallel_equals_the_cpu_reference(backend, request):
    from anydev.core import EngineConfig

    tp = engine_ranks(backend, request)
    expected = greedy_tokens(EngineConfig(device="cpu", tp=1, dtype="float32", max_model_len=256, max_num_seqs=8),
                             checkpoint=moe_model())
    got = greedy_tokens(engine_config(backend, tp), checkpoint=moe_model())
    assert all(expected), "the cpu reference generated nothing"
    assert got == expected, f"qwen3_moe at TP={tp} vs cpu TP=1: " + mismatch(got, expected)
