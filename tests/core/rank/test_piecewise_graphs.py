"""Piecewise graphs (core/rank/piecewise.py): steps that are not pure decodes replay L + 1 captured pieces
with the attentions run eagerly between them; the tokens equal those of the eager engine, on the cpu
backend's real recording graphs (ANYDEV_CPU_GRAPHS) and at TP=2."""
from __future__ import annotations

import pytest
from eager_ops import EagerOps, VIEW_OPS

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.rank.piecewise import token_bucket, token_buckets
from anydev.core.sched.scheduler import Sequence, build_step

PROMPTS = [[5, 6, 7, 8, 9], list(range(1, 13)), list(range(20, 40)), list(range(40, 66)), list(range(70, 79))]
GREEDY = SamplingParams(max_new_tokens=12)


def config(**changes):
    return EngineConfig(**{"max_num_seqs": 4, "max_model_len": 64, "block_size": 4, "max_num_batched_tokens": 24,
                           **changes})


def generate(engine_config, runs=None):
    """Tokens per prompt; ``runs`` (a list) gets (tokens, real tokens or None) of each step that is not
    a pure decode (rank 0); real tokens is None for a step run eagerly."""
    with InferEngine(demo_checkpoint(), engine_config) as engine:
        worker = engine.workers[0]
        if runs is not None:
            forward = worker.forward

            def recording(batch, *args):
                if not batch.is_decode:
                    runs.append((batch.T, batch.real_tokens))
                return forward(batch, *args)

            worker.forward = recording
        tokens = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
        captures = [w.pieces.captures if w.pieces else 0 for w in engine.workers]
        assert engine.block_manager.num_used == 0
    return tokens, captures


@pytest.fixture(scope="module")
def eager_tokens():
    return generate(config(use_graphs=False))[0]


@pytest.mark.parametrize("tp", [1, 2])
def test_mixed_and_prefill_steps_through_piecewise_graphs_give_the_eager_tokens(cpu_with_graphs, tp, eager_tokens):
    runs = []
    tokens, captures = generate(config(tp=tp), runs)
    layers = demo_checkpoint().config.num_hidden_layers
    assert captures == [len(token_buckets(24)) * (layers + 1)] * tp     # every bucket, L + 1 pieces, at start-up
    assert runs and all(real is not None and real <= padded for padded, real in runs)
    assert any(real < padded for padded, real in runs)                   # padding tokens ran too
    assert tokens == eager_tokens


def test_without_piecewise_graphs_the_same_steps_run_eagerly(cpu_with_graphs, eager_tokens):
    runs = []
    tokens, captures = generate(config(piecewise_max_tokens=0), runs)
    assert captures == [0] and runs and all(real is None for _, real in runs)
    assert tokens == eager_tokens


def test_a_step_longer_than_every_bucket_runs_eagerly(cpu_with_graphs, eager_tokens):
    runs = []
    tokens, _ = generate(config(piecewise_max_tokens=8), runs)          # buckets [8]: chunks of up to 24 tokens
    assert any(real is None and padded > 8 for padded, real in runs)
    assert all(padded == 8 for padded, real in runs if real is not None)
    assert tokens == eager_tokens


def test_token_buckets():
    assert token_buckets(24) == [16, 24]
    assert token_buckets(2048) == [16, 32, 64, 128, 256, 512, 1024, 2048]
    assert token_buckets(8) == [8]
    assert token_bucket(17, [16, 24]) == 24 and token_bucket(25, [16, 24]) is None


def test_padding_tokens_write_no_kv_and_belong_to_no_sequence():
    seqs = [Sequence(0, [3, 4, 5], 4), Sequence(1, [6, 7], 4)]
    for i, seq in enumerate(seqs):
        seq.assign_blocks([i], 4)
    batch = build_step(seqs, block_size=4, pad_tokens_to=8, num_prev=2)
    assert (batch.T, batch.real_tokens, batch.num_tokens) == (8, 5, 5)
    assert batch.slot_mapping.tolist()[5:] == [-1, -1, -1]
    assert batch.input_ids.tolist() == [3, 4, 5, 6, 7, 0, 0, 0]
    assert batch.cu_seqlens_q.tolist() == [0, 3, 5] and batch.last_index.tolist() == [2, 4]
    assert batch.token_src.tolist() == list(range(2, 10))
    with pytest.raises(ValueError, match="cannot be padded"):
        build_step(seqs, block_size=4, pad_tokens_to=4)


def eager_launches(kind: str):
    """The eager work of the first step of ``kind`` ("mixed": two decodes and a 20-token prompt;
    "prefill": the prompt alone) through the piecewise graphs: the ops between the replays that launch
    work (kernels, copies: views left out) by name, and the model's layer count."""
    seen = []
    with InferEngine(demo_checkpoint(), config()) as engine:
        worker = engine.workers[0]
        run = worker.pieces.run

        def counted(step):
            ops = EagerOps(worker.model.kernels)
            with ops.counting_kernels(), ops:
                logits = run(step)
            seen.append((step.num_decodes, ops))
            return logits

        worker.pieces.run = counted
        params = SamplingParams(max_new_tokens=4, ignore_eos=True)
        if kind == "mixed":
            seqs = [engine.add_request([5, 6, 7], params), engine.add_request([9, 10], params)]
            while any(seq.num_cached < len(seq.prompt) for seq in seqs) or not all(seq.output for seq in seqs):
                engine.step()
            seen.clear()
        engine.add_request(list(range(1, 21)), params)
        engine.step()
        layers = len(worker.model.layers)
    decodes, ops = seen[0]
    assert decodes == (2 if kind == "mixed" else 0)
    return {op: n for op, n in ops.ops.items() if op not in VIEW_OPS}, layers


def test_a_mixed_step_runs_three_ops_a_layer_between_its_graphs(cpu_with_graphs):
    # per layer: the decode and prefill attentions and the op that joins them into the next
    # graph's input; per step: the prefill rows' cu_seqlens offset, the last tokens, the lm_head
    launches, layers = eager_launches("mixed")
    assert launches == {"kernel:paged_decode_attention": layers, "kernel:paged_prefill_attention": layers,
                        "aten.cat.out": layers, "aten.sub.Tensor": 1, "aten.index_select.default": 1,
                        "kernel:linear": 1}


def test_a_prefill_step_runs_two_ops_a_layer_between_its_graphs(cpu_with_graphs):
    launches, layers = eager_launches("prefill")
    assert launches == {"kernel:paged_prefill_attention": layers, "aten.copy_.default": layers,
                        "aten.index_select.default": 1, "kernel:linear": 1}
