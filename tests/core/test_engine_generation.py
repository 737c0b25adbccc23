"""Generation on the cpu backend: sampling choices and their validation, EOS and length stops,
continuous batching, context limits."""
from __future__ import annotations

import pytest
import torch

from anydev.core import EngineConfig, EngineConfigError, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.sched.sampling import sample, sample_rows

PROMPTS = ["Hello, world!", "the model of the device is", "hi"]


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=8, max_model_len=128)) as engine:
        yield engine


def tokens(engine, sampling, prompts=PROMPTS):
    return [o.token_ids for o in engine.generate(prompts, sampling)]


def test_same_seed_same_tokens_and_another_seed_other_tokens(engine):
    hot = dict(max_new_tokens=24, temperature=1.5)
    first = tokens(engine, SamplingParams(seed=1, **hot))
    assert tokens(engine, SamplingParams(seed=1, **hot)) == first
    assert tokens(engine, SamplingParams(seed=2, **hot)) != first
    assert first != tokens(engine, SamplingParams(max_new_tokens=24))


def seeded_sequences(engine) -> list[int]:
    return engine.sampler.submit(engine.sampler.seeded_sequences).result()


def test_the_sampler_drops_the_generator_of_a_finished_or_aborted_sequence(engine):
    hot = dict(max_new_tokens=6, temperature=1.5)
    for seed in range(6):
        engine.generate(PROMPTS, SamplingParams(seed=seed, **hot))
        assert 0 < len(seeded_sequences(engine)) <= len(PROMPTS)   # the last call's: dropped at the next step
    aborted = [engine.add_request([5, 6, 7 + i], SamplingParams(seed=9, max_new_tokens=50, temperature=1.5))
               for i in range(3)]
    engine.step()
    engine.step()
    assert {seq.seq_id for seq in aborted} <= set(seeded_sequences(engine))
    for seq in aborted:
        engine.abort(seq)
    engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2))
    assert seeded_sequences(engine) == []


def test_top_k_1_and_a_tiny_top_p_are_greedy(engine):
    greedy = tokens(engine, SamplingParams(max_new_tokens=16))
    assert tokens(engine, SamplingParams(max_new_tokens=16, temperature=1.0, top_k=1, seed=3)) == greedy
    assert tokens(engine, SamplingParams(max_new_tokens=16, temperature=1.0, top_p=1e-6, seed=3)) == greedy


def test_sample_keeps_only_the_top_k_and_the_nucleus():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0, -1.0]]).repeat(200, 1)
    generator = torch.Generator().manual_seed(0)
    top2 = sample(logits, SamplingParams(temperature=1.0, top_k=2), generator)
    assert set(top2.tolist()) == {1, 2}
    probs = logits[0].softmax(-1)    # nucleus of 0.8: tokens 1 (0.64) and 2 (0.24) are needed
    assert probs[1] < 0.8 < probs[1] + probs[2]
    nucleus = sample(logits, SamplingParams(temperature=1.0, top_p=0.8), generator)
    assert set(nucleus.tolist()) == {1, 2}
    assert sample(logits[:1], SamplingParams(), None).tolist() == [1]


def test_sample_rows_applies_each_rows_own_parameters():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0, -1.0]]).repeat(8, 1)
    logits[0, 4] = 9.0      # the greedy row's argmax differs from the other rows'
    params = [SamplingParams(), None, SamplingParams(temperature=1.0, top_k=2), SamplingParams(temperature=1.0, top_p=0.8),
              SamplingParams(temperature=1.0, top_k=1), SamplingParams(temperature=1.0, top_k=2, top_p=0.64),
              SamplingParams(temperature=1.0, top_k=3, seed=1), SamplingParams(temperature=50.0)]
    seen = [set() for _ in params]
    torch.manual_seed(0)
    for draw in range(300):
        generators = [None] * 6 + [torch.Generator().manual_seed(draw), None]
        for row, token in enumerate(sample_rows(logits, params, generators).tolist()):
            seen[row].add(token)
    assert seen[:6] == [{4}, {1}, {1, 2}, {1, 2}, {1}, {1}]
    assert seen[6] == {1, 2, 3}
    assert seen[7] == {0, 1, 2, 3, 4}      # hot: every token, none filtered


@pytest.mark.parametrize("field, value", [
    ("max_new_tokens", 0), ("max_new_tokens", 2.5), ("temperature", -0.1), ("temperature", float("nan")),
    ("top_k", -1), ("top_p", 0.0), ("top_p", 1.5), ("seed", -3), ("seed", "7"),
])
def test_bad_sampling_values_are_config_errors_naming_the_field(engine, field, value):
    with pytest.raises(EngineConfigError, match=field):
        engine.generate(["hi"], SamplingParams(**{field: value}))


def test_generation_stops_at_an_eos_token(engine):
    free_run = tokens(engine, SamplingParams(max_new_tokens=20), ["hi"])[0]
    stop_token = free_run[5]
    original = engine.checkpoint.config.eos_token_ids
    engine.checkpoint.config.eos_token_ids = [*original, stop_token]
    try:
        out = engine.generate(["hi"], SamplingParams(max_new_tokens=20))[0]
    finally:
        engine.checkpoint.config.eos_token_ids = original
    assert out.token_ids == free_run[:free_run.index(stop_token) + 1]
    assert out.finish_reason == "eos"


def test_length_stop_and_the_context_cap(engine):
    out = engine.generate(["hi"], SamplingParams(max_new_tokens=7))[0]
    assert (len(out.token_ids), out.finish_reason) == (7, "length")
    long_prompt = list(range(2, 2 + 120))    # 120 of the 128-token context leaves 8 to generate
    out = engine.generate_ids([long_prompt], SamplingParams(max_new_tokens=50))[0]
    assert (len(out.token_ids), out.finish_reason) == (8, "length")


def test_more_prompts_than_slots_run_in_turn_with_the_same_tokens():
    prompts = [[2 + i, 40 + 3 * i, 7] * (i + 1) for i in range(5)]
    sampling = SamplingParams(max_new_tokens=10)
    with InferEngine(demo_checkpoint(), EngineConfig()) as engine:
        alone = [engine.generate_ids([p], sampling)[0].token_ids for p in prompts]
    # Two sequences at a time, and only enough KV blocks for two: finished ones make room for the rest.
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=2, num_blocks=6, block_size=8)) as engine:
        together = [o.token_ids for o in engine.generate_ids(prompts, sampling)]
        assert engine.block_manager.num_used == 0
    assert together == alone


@pytest.mark.parametrize("prompt, message", [
    ([], "prompt 0 is empty"),
    ([5, 10**6], "outside the vocabulary"),
    (list(range(2, 130)), "128 tokens, but the context"),
])
def test_bad_prompts_are_config_errors(engine, prompt, message):
    with pytest.raises(EngineConfigError, match=message):
        engine.generate_ids([prompt])


def test_a_sequence_needing_more_blocks_than_the_cache_is_a_config_error():
    with InferEngine(demo_checkpoint(), EngineConfig(num_blocks=2, block_size=4)) as engine:
        with pytest.raises(EngineConfigError, match="needs 3 KV blocks"):
            engine.generate_ids([[5, 6, 7, 8, 9]], SamplingParams(max_new_tokens=6))
