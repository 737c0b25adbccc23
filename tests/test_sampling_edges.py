"""Sampling parameters at the edge of their ranges give a token, never NaN probabilities: a
temperature or top_p so small that it rounds to 0 in float32 once made the probabilities NaN, and
torch.multinomial's error stopped the engine for every request (found by schemathesis)."""
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
