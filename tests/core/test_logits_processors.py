"""Logit bias, penalties and min_p, on the device: equal to HF transformers' logits processors on
the same logits (RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor, MinPLogitsWarper) and
to OpenAI's formula for the frequency and presence penalties; end to end, greedy generation with a
repetition or frequency penalty gives HF generate's tokens with the same processors (float32, an HF
llama checkpoint the tests write), and TP=2 / PP=2 give the single rank's."""
from __future__ import annotations

import pytest
import torch

from anydev.core import EngineConfig, EngineConfigError, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.sched.logits_processors import apply_to_row, min_p_filter
from checkpoints import write_hf_checkpoint

transformers = pytest.importorskip("transformers")
from transformers.generation.logits_process import (LogitsProcessor, MinPLogitsWarper,  # noqa: E402
                                                    RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor)

VOCAB = 64
PROMPTS = [[5, 9, 33, 70, 12], [101, 7], list(range(40, 61))]


def history_of(prompt: list[int], output: list[int]):
    counts = torch.bincount(torch.tensor(output, dtype=torch.int64), minlength=VOCAB).to(torch.int32)
    mask = torch.zeros(VOCAB, dtype=torch.bool)
    mask[torch.tensor(prompt)] = True
    return counts, mask


@pytest.mark.parametrize("penalty", [0.7, 1.3, 2.0])
def test_repetition_penalty_equals_hf_s_processor(penalty):
    generator = torch.Generator().manual_seed(int(penalty * 10))
    logits = torch.randn(VOCAB, generator=generator) * 3
    prompt, output = [1, 5, 9, 9], [9, 20, 33, 20]
    got = apply_to_row(logits, SamplingParams(repetition_penalty=penalty), history_of(prompt, output))
    expected = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([prompt + output]), logits[None].clone())[0]
    assert torch.allclose(got, expected)


def test_frequency_and_presence_penalties_follow_openai_s_formula():
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(0))
    prompt, output = [1, 2, 3], [4, 4, 4, 7, 1]
    got = apply_to_row(logits, SamplingParams(frequency_penalty=0.5, presence_penalty=1.5), history_of(prompt, output))
    expected = logits.clone()
    for token in set(output):           # the output only: prompt token 2 keeps its logit
        expected[token] -= 0.5 * output.count(token) + 1.5
    assert torch.allclose(got, expected)


def test_logit_bias_equals_hf_s_sequence_bias():
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(1))
    bias = {3: 5.0, 17: -100.0, 40: 0.25}
    got = apply_to_row(logits, SamplingParams(logit_bias=bias), None)
    hf = SequenceBiasLogitsProcessor({(token,): value for token, value in bias.items()})
    assert torch.allclose(got, hf(torch.tensor([[1, 2]]), logits[None].clone())[0])


@pytest.mark.parametrize("min_p", [0.05, 0.3, 1.0])
def test_min_p_equals_hf_s_warper(min_p):
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(2)) * 2
    got = min_p_filter(logits, torch.full((3, 1), min_p))
    expected = MinPLogitsWarper(min_p)(torch.zeros(3, 1, dtype=torch.long), logits.clone())
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    assert torch.equal(got[~torch.isinf(got)], logits[~torch.isinf(got)])


class OpenAIPenalties(LogitsProcessor):
    """OpenAI's frequency/presence penalties for HF generate: over the tokens after the prompt."""

    def __init__(self, prompt_len: int, frequency: float, presence: float):
        self.prompt_len, self.frequency, self.presence = prompt_len, frequency, presence

    def __call__(self, input_ids, scores):
        counts = torch.zeros_like(scores)
        counts.scatter_add_(1, input_ids[:, self.prompt_len:], torch.ones_like(input_ids[:, self.prompt_len:],
                                                                                 dtype=scores.dtype))
        return scores - self.frequency * counts - self.presence * (counts > 0)


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("penalties") / "llama", arch="llama")


@pytest.mark.parametrize("case", ["repetition", "frequency+presence"])
def test_greedy_tokens_with_penalties_equal_hf_generate(checkpoint_dir, case):
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32).eval()
    sampling = SamplingParams(max_new_tokens=16, ignore_eos=True, **(
        {"repetition_penalty": 1.8} if case == "repetition" else {"frequency_penalty": 1.2, "presence_penalty": 0.6}))
    with InferEngine(checkpoint_dir, EngineConfig(block_size=4)) as engine:
        outputs = engine.generate_ids(PROMPTS, sampling)
        plain = engine.generate_ids(PROMPTS, SamplingParams(max_new_tokens=16, ignore_eos=True))
    assert [o.token_ids for o in outputs] != [o.token_ids for o in plain]     # the penalty changed the answer
    for prompt, out in zip(PROMPTS, outputs):
        ids = torch.tensor([prompt])
        extra = {"repetition_penalty": 1.8} if case == "repetition" else \
            {"logits_processor": [OpenAIPenalties(len(prompt), 1.2, 0.6)]}
        with torch.no_grad():
            expected = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                         eos_token_id=None, pad_token_id=0, min_new_tokens=16, **extra)
        assert out.token_ids == expected[0, len(prompt):].tolist()


def penalized_tokens(config: EngineConfig) -> list[list[int]]:
    sampling = [SamplingParams(max_new_tokens=12, ignore_eos=True, repetition_penalty=1.5),
                SamplingParams(max_new_tokens=12, ignore_eos=True, frequency_penalty=1.0, logit_bias={7: 3.0}),
                SamplingParams(max_new_tokens=12, ignore_eos=True, temperature=1.0, seed=4, min_p=0.2,
                               presence_penalty=1.0)]
    with InferEngine(demo_checkpoint(), config) as engine:
        seqs = [engine.add_request(p, s) for p, s in zip(PROMPTS, sampling)]
        while engine.has_unfinished:
            engine.step()
        engine.generate_ids(PROMPTS[:1], SamplingParams(max_new_tokens=2))    # the next steps tell the sampler
        assert engine.sampler.submit(engine.sampler.penalized_sequences).result() == []   # records dropped
        return [s.output for s in seqs]


@pytest.fixture(scope="module")
def single_rank():
    return penalized_tokens(EngineConfig())


@pytest.mark.parametrize("config", [EngineConfig(tp=2), EngineConfig(pp=2), EngineConfig(pp=2, executor="mp")],
                         ids=["tp2", "pp2", "pp2-processes"])
def test_every_layout_gives_the_single_rank_s_penalized_tokens(config, single_rank):
    assert penalized_tokens(config) == single_rank


def test_out_of_range_values_are_refused():
    for bad in (dict(min_p=1.5), dict(presence_penalty=3), dict(repetition_penalty=0), dict(repetition_penalty=5e-324),
                dict(repetition_penalty=0.05), dict(logit_bias={1: 200})):
        with pytest.raises(EngineConfigError):
            SamplingParams(**bad).validate()
    with InferEngine(demo_checkpoint(), EngineConfig()) as engine:
        with pytest.raises(EngineConfigError, match="outside the vocabulary"):
            engine.add_request([1, 2], SamplingParams(logit_bias={10**6: 1.0}))
