"""``EngineConfig.seed`` (``--seed`` of serve and test_infer, vLLM's): requests without a seed of
their own draw from the sampler's seeded state, so the same requests draw the same tokens again."""
from __future__ import annotations

import pytest

from anydev.core import EngineConfig, EngineConfigError, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint

PROMPTS = ["the device is", "hello world, a model"]


def sampled(seed, **config) -> list[list[int]]:
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=64, use_graphs=False, seed=seed, **config)) as engine:
        outputs = engine.generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=1.0))
    return [o.token_ids for o in outputs]


def test_the_same_seed_draws_the_same_unseeded_tokens_again():
    first = sampled(11)
    assert sampled(12) != first                  # the tokens are drawn (another seed, other tokens) ...
    assert sampled(11) == first                  # ... and the seed draws them again


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_a_seed_out_of_range_is_refused(seed):
    with pytest.raises(EngineConfigError, match="seed must be an integer"):
        InferEngine(demo_checkpoint(), EngineConfig(seed=seed))
