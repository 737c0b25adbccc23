"""Overlapped steps (``EngineConfig.async_steps``): step N+1 is built and launched before step N's
tokens are read back; a sequence's newest token then waits on the device and the next step takes it
from there. The tokens must be exactly those of the synchronous engine, whatever ends a sequence
(EOS, a stop string, its length, an abort) and whatever the scheduler does meanwhile (preemption,
prefix caching, chunked prefill, tensor parallelism)."""
from __future__ import annotations

import threading

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint

PROMPTS = ["Hello, world!", "the model of the device is", "hi", "a much longer prompt " * 6]


def outputs(prompts=PROMPTS, sampling=None, preemptions=None, **config):
    """(token ids, finish reason, text) of each prompt; ``preemptions`` (a list) gets the count."""
    config = {"max_num_seqs": 4, "max_model_len": 160, **config}
    with InferEngine(demo_checkpoint(), EngineConfig(**config)) as engine:
        results = engine.generate(prompts, sampling or SamplingParams(max_new_tokens=24))
        assert engine.block_manager.num_used == 0            # every block back at the end
        if preemptions is not None:
            preemptions.append(engine.scheduler.num_preemptions)
    return [(o.token_ids, o.finish_reason, o.text) for o in results]


@pytest.mark.parametrize("config", [
    {},
    {"use_graphs": False},
    {"tp": 2},
    {"num_blocks": 40, "block_size": 4},                   # a tiny cache: sequences get preempted
    {"max_num_batched_tokens": 8},                         # prompts in chunks beside decodes
    {"enable_chunked_prefill": False},
])
def test_overlapped_steps_give_the_tokens_of_synchronous_steps(config):
    preemptions = []
    assert outputs(async_steps=True, preemptions=preemptions, **config) == outputs(async_steps=False, **config)
    if "num_blocks" in config:
        assert preemptions[0] > 0


def test_sampled_and_seeded_tokens_are_those_of_synchronous_steps():
    hot = SamplingParams(max_new_tokens=20, temperature=1.3, top_k=20, seed=7)
    assert outputs(sampling=hot, async_steps=True) == outputs(sampling=hot, async_steps=False)
    assert outputs(sampling=hot, async_steps=True, tp=2) == outputs(sampling=hot, async_steps=False)


def test_stops_that_only_the_host_sees_end_the_sequence_at_the_same_token():
    """EOS and stop strings are found one step late (the next step is already running): the extra
    token is dropped and the outputs equal the synchronous ones."""
    plain = outputs(async_steps=False)
    text = plain[1][2]
    stop = SamplingParams(max_new_tokens=24, stop=[text[len(text) // 3:len(text) // 3 + 2]])
    eos_token = plain[0][0][5]
    eos = SamplingParams(max_new_tokens=24, stop_token_ids=[eos_token])
    for sampling in (stop, eos):
        synchronous = outputs(sampling=sampling, async_steps=False)
        assert any(reason == "stop" for _, reason, _ in synchronous)
        assert outputs(sampling=sampling, async_steps=True) == synchronous


def test_a_step_is_launched_before_the_previous_steps_tokens_are_read():
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=2, max_model_len=64)) as engine:
        seq = engine.add_request([5, 6, 7, 8], SamplingParams(max_new_tokens=4))
        assert engine.step() == []                         # the prompt ran; its token is still pending
        assert (seq.num_pending, seq.output) == (1, [])
        assert engine.step() == [seq]                      # the first decode launched, then the token read
        assert (seq.num_pending, len(seq.output)) == (1, 1)
        while not seq.is_finished:
            engine.step()
        assert (seq.num_pending, len(seq.output), seq.finish_reason) == (0, 4, "length")
        assert not engine.has_unfinished and engine.step() == []


def test_an_abort_while_a_token_is_pending_drops_it_and_frees_the_blocks():
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=2, max_model_len=64)) as engine:
        kept = engine.add_request([5, 6, 7, 8], SamplingParams(max_new_tokens=6))
        dropped = engine.add_request([9, 10, 11], SamplingParams(max_new_tokens=6))
        engine.step()
        engine.step()
        assert dropped.num_pending == 1
        engine.abort(dropped)
        while engine.has_unfinished:
            engine.step()
        assert dropped.finish_reason == "abort" and len(dropped.output) == 1 and dropped.num_pending == 0
        assert kept.finish_reason == "length" and engine.block_manager.num_used == 0
        alone = engine.generate_ids([[5, 6, 7, 8]], SamplingParams(max_new_tokens=6))[0].token_ids
        assert kept.output == alone


def test_requests_joining_from_other_threads_get_the_tokens_they_get_alone():
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=4, max_model_len=64)) as engine:
        alone = [engine.generate_ids([p], SamplingParams(max_new_tokens=12))[0].token_ids for p in prompts]
        results = [None] * len(prompts)

        def run(i):
            results[i] = engine.generate_ids([prompts[i]], SamplingParams(max_new_tokens=12))[0].token_ids

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert results == alone and engine.block_manager.num_used == 0
