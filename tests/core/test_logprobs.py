"""Logprobs computed on the device by the sampling rank, of output tokens and of prompts: equal to HF
transformers' log-softmax on the same token ids (float32, an HF llama checkpoint the tests write),
greedy and sampled with a seed; the same under TP=2, PP=2 (micro-batches of different widths) and on
rank processes; only rows that ask pay, and what they asked for is what comes back. A scored prompt
is computed whole, past the prefix cache, beside other requests' decodes."""
from __future__ import annotations

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from checkpoints import write_hf_checkpoint

transformers = pytest.importorskip("transformers")

#: float32 on both sides; the engine's kernels sum in another order than HF's.
TOLERANCE = 1e-4
PROMPTS = [[5, 9, 33, 70, 12], [101, 7], list(range(40, 61))]


def hf_log_softmax(model, prompt: list[int], output: list[int]) -> torch.Tensor:
    """HF's log-softmax [len(output), vocab] before each output token (teacher-forced)."""
    ids = torch.tensor([prompt + output[:-1]])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:].float()
    return logits.log_softmax(dim=-1)


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("logprobs") / "llama", arch="llama")


@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=10, logprobs=5),
                                      SamplingParams(max_new_tokens=10, temperature=1.0, top_k=20, seed=7, logprobs=3)],
                         ids=["greedy", "sampled"])
def test_output_logprobs_equal_transformers_log_softmax(checkpoint_dir, sampling):
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32).eval()
    with InferEngine(checkpoint_dir, EngineConfig(block_size=4)) as engine:
        outputs = engine.generate_ids(PROMPTS, sampling)
    for prompt, out in zip(PROMPTS, outputs):
        assert len(out.logprobs) == len(out.token_ids)
        reference = hf_log_softmax(hf_model, prompt, out.token_ids)
        for position, (token, got) in enumerate(zip(out.token_ids, out.logprobs)):
            row = reference[position]
            assert got.logprob == pytest.approx(row[token].item(), abs=TOLERANCE)
            values, ids = row.topk(sampling.logprobs)
            assert [i for i, _ in got.top] == ids.tolist()
            assert [v for _, v in got.top] == pytest.approx(values.tolist(), abs=TOLERANCE)


def test_only_the_requests_that_ask_get_logprobs_and_as_many_as_they_ask():
    with InferEngine(demo_checkpoint(), EngineConfig()) as engine:
        asks = [engine.add_request(p, SamplingParams(max_new_tokens=6, logprobs=k)) for p, k in zip(PROMPTS, (2, None, 0))]
        while engine.has_unfinished:
            engine.step()
    assert [len(s.logprobs) for s in asks] == [6, 0, 6]
    assert {len(lp.top) for lp in asks[0].logprobs} == {2} and {len(lp.top) for lp in asks[2].logprobs} == {0}


def logprobs_of(config: EngineConfig, asks=(5, 1, 3), prompt_asks=(2, None, 4)) -> list:
    with InferEngine(demo_checkpoint(), config) as engine:
        seqs = [engine.add_request(p, SamplingParams(max_new_tokens=8, logprobs=k, prompt_logprobs=pk))
                for p, k, pk in zip(PROMPTS, asks, prompt_asks)]
        while engine.has_unfinished:
            engine.step()
        return [(s.output, s.prompt_logprobs + s.logprobs) for s in seqs]


@pytest.fixture(scope="module")
def single_rank():
    return logprobs_of(EngineConfig())


@pytest.mark.parametrize("config", [EngineConfig(tp=2), EngineConfig(pp=2), EngineConfig(pp=2, executor="mp")],
                         ids=["tp2", "pp2", "pp2-processes"])
def test_every_executor_gives_the_single_rank_logprobs(config, single_rank):
    for (tokens, expected), (got_tokens, got) in zip(single_rank, logprobs_of(config)):
        assert got_tokens == tokens
        for a, b in zip(expected, got):
            assert b.logprob == pytest.approx(a.logprob, abs=TOLERANCE)
            assert [i for i, _ in b.top] == [i for i, _ in a.top]
            assert [v for _, v in b.top] == pytest.approx([v for _, v in a.top], abs=TOLERANCE)


def test_logprobs_above_the_maximum_are_refused():
    from anydev.core import EngineConfigError
    with pytest.raises(EngineConfigError, match="logprobs must be an integer in 0..20"):
        SamplingParams(logprobs=21).validate()


def test_prompt_logprobs_equal_transformers_log_softmax(checkpoint_dir):
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32).eval()
    with InferEngine(checkpoint_dir, EngineConfig(block_size=4)) as engine:
        outputs = engine.generate_ids(PROMPTS, SamplingParams(max_new_tokens=1, prompt_logprobs=4))
    for prompt, out in zip(PROMPTS, outputs):
        with torch.no_grad():
            reference = hf_model(torch.tensor([prompt])).logits[0, :-1].float().log_softmax(dim=-1)
        assert len(out.prompt_logprobs) == len(prompt) - 1 and out.logprobs is None
        for position, got in enumerate(out.prompt_logprobs):
            row = reference[position]
            assert got.logprob == pytest.approx(row[prompt[position + 1]].item(), abs=TOLERANCE)
            values, ids = row.topk(4)
            assert [i for i, _ in got.top] == ids.tolist()
            assert [v for _, v in got.top] == pytest.approx(values.tolist(), abs=TOLERANCE)


def test_a_scored_prompt_is_computed_whole_past_the_prefix_cache_beside_decodes():
    prompt = list(range(10, 60))
    config = EngineConfig(block_size=4, enable_prefix_caching=True, max_num_batched_tokens=64)
    with InferEngine(demo_checkpoint(), config) as engine:
        first = engine.generate_ids([prompt], SamplingParams(max_new_tokens=1, prompt_logprobs=1))[0]
        running = engine.add_request(list(range(70, 90)), SamplingParams(max_new_tokens=20))
        engine.step()                                  # it decodes while the scored prompt arrives
        again = engine.add_request(prompt, SamplingParams(max_new_tokens=1, prompt_logprobs=1))
        while not again.is_finished:
            engine.step()
        assert again.num_prefix_hit == 0 and len(again.prompt_logprobs) == len(prompt) - 1
        assert [e.logprob for e in again.prompt_logprobs] == pytest.approx([e.logprob for e in first.prompt_logprobs],
                                                                          abs=TOLERANCE)
        engine.abort(running)
        with pytest.raises(Exception, match="scoring a prompt"):
            engine.add_request(list(range(3, 80)), SamplingParams(max_new_tokens=1, prompt_logprobs=0))
