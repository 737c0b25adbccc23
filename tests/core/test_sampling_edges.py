"""Sampling parameters at the edge of their ranges give a token, never NaN probabilities: a
temperature or top_p so small that it rounds to 0 in float32 must not make the probabilities NaN,
where torch.multinomial's error would stop the engine for every request (schemathesis sends such
values)."""
from __future__ import annotations

import pytest
import torch

from anydev.core.sched.sampling import SamplingParams, sample, sample_rows


@pytest.mark.parametrize("temperature, top_p", [(5e-324, 1.0), (1e-7, 0.9), (1.0, 5e-324), (0.7, 1e-300),
                                                (2.0, 1e-45)])
def test_tiny_temperature_or_top_p_picks_the_likeliest_token(temperature, top_p):
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    params = SamplingParams(temperature=temperature, top_p=top_p)
    params.validate()
    best = logits.argmax(dim=-1)
    assert torch.equal(sample(logits, params, torch.Generator().manual_seed(0)), best)
    assert torch.equal(sample_rows(logits, [params] * 4, [None] * 4), best)
    assert torch.equal(sample_rows(logits, [params] * 4, [torch.Generator().manual_seed(0)] * 4), best)


def test_a_moderate_top_p_still_samples_among_several_tokens():
    logits = torch.zeros(1, 64)              # uniform: top_p 0.5 keeps half of them
    params = SamplingParams(temperature=1.0, top_p=0.5)
    seen = {int(sample(logits, params, torch.Generator().manual_seed(s))[0]) for s in range(40)}
    assert 5 < len(seen) <= 33


def test_a_seed_past_64_bits_is_refused_up_front_and_the_engine_keeps_serving():
    # torch's generators take 64-bit seeds: a larger one would fail inside a step and stop every rank
    from anydev.core import EngineConfig, EngineConfigError, InferEngine, SamplingParams
    from anydev.core.loading.checkpoint import demo_checkpoint

    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, num_blocks=16, max_model_len=64)) as engine:
        with pytest.raises(EngineConfigError, match="seed must be an integer in 0..2\\*\\*64-1"):
            engine.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=4, temperature=1.0, seed=2**64))
        [largest] = engine.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=4, temperature=1.0, seed=2**64 - 1))
        assert len(largest.token_ids) == 4


@pytest.mark.parametrize("call", [lambda e: e.generate(None), lambda e: e.generate_ids(None),
                                  lambda e: e.generate_ids([None]), lambda e: e.abort(None),
                                  lambda e: e.generate_ids([[1, 2]], sampling={"seed": 1})])
def test_a_missing_or_wrong_argument_is_a_typed_error(call):
    from anydev.core import EngineConfig, EngineConfigError, InferEngine
    from anydev.core.loading.checkpoint import demo_checkpoint

    with InferEngine(demo_checkpoint(), EngineConfig(num_blocks=16, max_model_len=64)) as engine:
        with pytest.raises(EngineConfigError):
            call(engine)
