"""Steps of the flat packed format on the cpu backend: prompt chunks and decodes mixed in one step give
the tokens of separate steps; the kernels the model calls follow ``EngineConfig.kernels``; under TP
the lm_head is split by vocabulary and its logits all-gathered."""
from __future__ import annotations

import pytest
import torch

from anydev.core import EngineConfig, InferEngine
from anydev.core.sched.scheduler import ScheduledStep
from anydev.core.step_loop import _row_params
from anydev.plugin_api.kernels import KERNEL_NAMES, REFERENCES, KernelSet
from anydev.core.loading.random_weights import llama_config, random_checkpoint
from anydev.core.sched.sampling import SamplingParams as Params
from anydev.core.sched.scheduler import Sequence

BLOCK = 4
SHAPE = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2)


def demo_checkpoint(tied: bool = False):
    """A small llama with random weights and no EOS: every sequence runs to its length."""
    config = llama_config(max_position_embeddings=128, **SHAPE)
    config.tie_word_embeddings = tied
    return random_checkpoint(config, seed=3)

PROMPTS = [list(range(5, 16)), [40, 41, 42, 43, 44, 45, 46], [7, 8, 9]]
GREEDY = Params(max_new_tokens=6)


def drive(engine, prompts, schedule, new_tokens=6):
    """Greedy tokens when the engine runs the given steps, then decodes everyone to ``new_tokens``.

    ``schedule``: steps, each a list of (sequence, tokens to feed). A sequence samples a token when a
    step feeds its last uncached token (a chunk that ends inside the prompt samples nothing)."""
    seqs = new_seqs(prompts, new_tokens)

    def run(step):
        chosen, counts = [seqs[i] for i, _ in step], [n for _, n in step]
        batch = engine.build_step(chosen, counts)
        plan = ScheduledStep(chosen, counts, [])
        ticket, _ = engine._run_step(batch, plan, _row_params(plan))
        tokens = engine.workers[0].read_tokens(ticket)
        for seq, (_, n), token in zip(chosen, step, tokens):
            seq.num_cached += n
            if seq.num_cached == seq.num_tokens:
                seq.output.append(token)

    for step in schedule:
        run(step)
    while any(len(seq.output) < new_tokens for seq in seqs):
        run([(seq.index, 1) for seq in seqs if len(seq.output) < new_tokens])
    return [seq.output for seq in seqs]


def new_seqs(prompts, new_tokens):
    """Sequences with disjoint KV blocks of their own (the engine's block manager is not used)."""
    seqs, first = [], 0
    for i, ids in enumerate(prompts):
        seq = Sequence(i, list(ids), new_tokens)
        count = seq.blocks_needed(BLOCK)
        seq.assign_blocks(list(range(first, first + count)), BLOCK)
        first += count
        seqs.append(seq)
    return seqs


def engine_config(**changes):
    return EngineConfig(max_num_seqs=4, max_model_len=64, block_size=BLOCK, **changes)


@pytest.fixture(scope="module")
def separate_tokens():
    with InferEngine(demo_checkpoint(), engine_config()) as engine:
        return [engine.generate_ids([p], GREEDY)[0].token_ids for p in PROMPTS]


def test_mixed_prefill_chunks_and_decodes_give_the_tokens_of_separate_steps(separate_tokens):
    schedule = [
        [(0, 11)],                    # prompt 0 whole
        [(0, 1), (1, 4)],             # a decode of 0 beside the first chunk of prompt 1
        [(1, 3), (0, 1), (2, 2)],     # the rest of prompt 1, a decode, the first chunk of prompt 2
        [(2, 1), (0, 1), (1, 1)],     # the last token of prompt 2 beside two decodes
    ]
    with InferEngine(demo_checkpoint(), engine_config()) as engine:
        assert drive(engine, PROMPTS, schedule) == separate_tokens


def test_a_mixed_step_is_one_packed_step_without_padding():
    with InferEngine(demo_checkpoint(), engine_config()) as engine:
        seqs = new_seqs(PROMPTS[:2], 4)
        seqs[0].num_cached = 11
        seqs[0].output = [3]
        batch = engine.build_step(seqs)
    assert (batch.T, batch.B, batch.max_q_len, batch.is_decode) == (8, 2, 7, False)
    assert batch.positions.tolist() == [11] + list(range(7))
    assert batch.cu_seqlens_q.tolist() == [0, 1, 8] and batch.seq_lens.tolist() == [12, 7]


def counting_kernels(offered=KERNEL_NAMES):
    """A backend's kernel set: the references of ``offered``, counting their calls, offered as native
    (a fused kernel left out is composed of the counted parts)."""
    calls = {name: 0 for name in KERNEL_NAMES}

    def counted(name):
        def call(*args, **kwargs):
            calls[name] += 1
            return REFERENCES[name](*args, **kwargs)
        return call

    return KernelSet("cpu", {name: counted(name) for name in offered}, note="counting"), calls


def test_a_mixed_steps_decodes_run_as_decode_attention_and_only_its_chunk_as_prefill(monkeypatch, separate_tokens):
    from anydev.plugin_api import load_backend

    queries = {"paged_decode_attention": [], "paged_prefill_attention": []}    # each call's query rows

    def recorded(name):
        def call(q, *args):
            queries[name].append(q.shape[0])
            return REFERENCES[name](q, *args)
        return call

    kernels = KernelSet("cpu", {**{name: REFERENCES[name] for name in KERNEL_NAMES},
                                **{name: recorded(name) for name in queries}}, note="recording")
    monkeypatch.setattr(type(load_backend("cpu")), "kernels", lambda self: kernels)
    with InferEngine(demo_checkpoint(), engine_config()) as engine:
        # prompt 0 whole; then its decode (first) beside prompt 1's first chunk of 4 tokens
        assert drive(engine, PROMPTS[:2], [[(0, 11)], [(0, 1), (1, 4)]]) == separate_tokens[:2]
    layers = demo_checkpoint().config.num_hidden_layers
    assert queries["paged_prefill_attention"][:2 * layers] == [11] * layers + [4] * layers
    assert queries["paged_decode_attention"][:layers] == [1] * layers


@pytest.mark.parametrize("mode,fused", [("native", True), ("native", False), ("reference", True)])
def test_the_model_calls_the_backend_kernels_only_in_native_mode(mode, fused, monkeypatch, separate_tokens):
    from anydev.plugin_api import load_backend

    offered = KERNEL_NAMES if fused else [n for n in KERNEL_NAMES if n != "rotary_write_kv"]
    kernels, calls = counting_kernels(offered)
    monkeypatch.setattr(type(load_backend("cpu")), "kernels", lambda self: kernels)
    with InferEngine(demo_checkpoint(), engine_config(kernels=mode)) as engine:
        tokens = [engine.generate_ids([p], GREEDY)[0].token_ids for p in PROMPTS]
        description = engine.kernels_description
    assert tokens == separate_tokens
    layers = demo_checkpoint().config.num_hidden_layers
    if mode == "native":
        assert description == kernels.describe() and "native (counting) write_kv" in description
        steps = len(PROMPTS) * GREEDY.max_new_tokens
        if fused:    # one fused call per layer and step, never the parts
            assert calls["rotary_write_kv"] == steps * layers
            assert calls["write_kv"] == calls["rotary_embedding"] == 0
        else:        # the parts, through the kernel set's composition
            assert "rotary_write_kv as rotary_embedding + write_kv" in description
            assert calls["write_kv"] == calls["rotary_embedding"] == steps * layers
        decode_steps = len(PROMPTS) * (GREEDY.max_new_tokens - 1)
        assert calls["paged_decode_attention"] == decode_steps * layers
        assert calls["paged_prefill_attention"] == len(PROMPTS) * layers
        assert calls["silu_and_mul"] == steps * layers
        assert calls["rms_norm"] == steps                                 # the first layer's norm
        assert calls["fused_add_rms_norm"] == steps * 2 * layers          # the rest, the final one
    else:
        assert description.startswith("cpu kernels: reference write_kv")
        assert "; rotary_write_kv as rotary_embedding + write_kv" in description
        assert not any(calls.values())


@pytest.mark.parametrize("tied", [False, True])
def test_tp2_splits_the_lm_head_by_vocabulary_and_gathers_the_logits(monkeypatch, tied):
    checkpoint = demo_checkpoint(tied)
    vocab = checkpoint.config.vocab_size
    with InferEngine(checkpoint, engine_config()) as one:
        full = one.workers[0].model.lm_head.cpu().clone()   # the cpu backend: .cpu() is the device memory itself
        expected = [o.token_ids for o in one.generate_ids(PROMPTS, GREEDY)]
    gathers = []
    with InferEngine(checkpoint, engine_config(tp=2)) as two:
        for rank, worker in enumerate(two.workers):
            part = worker.model.lm_head
            assert part.shape == (vocab // 2, full.shape[1])
            torch.testing.assert_close(part.cpu(), full[rank * vocab // 2:(rank + 1) * vocab // 2], rtol=0, atol=0)
            if not tied:   # the rank loaded only its rows
                assert worker.weights.tensors["lm_head.weight"].shape[0] == vocab // 2
            else:          # a view of the replicated embeddings
                assert part.data_ptr() == worker.weights.tensors["model.embed_tokens.weight"][rank * vocab // 2].data_ptr()
            original = worker._all_gather
            monkeypatch.setattr(worker, "_all_gather",
                                lambda send, recv, original=original: (gathers.append(send.shape), original(send, recv)))
            worker.model.all_gather = worker._all_gather
        tokens = [o.token_ids for o in two.generate_ids(PROMPTS, GREEDY)]
    assert tokens == expected
    assert gathers and all(shape[-1] == vocab // 2 for shape in gathers)
