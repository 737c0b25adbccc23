"""Decode through per-bucket graphs, on the cpu backend (no device graphs there): the engine takes a
graph factory, and these tests give it an "eager graph" whose capture keeps the forward as a Python
callable and whose replay re-runs it on the bucket's static buffers. So everything around the real
device graph is checked here: padding to buckets, the static input copy, the scratch KV slot, one
capture per bucket, lockstep over TP ranks, sampling of the real rows only."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.checkpoint import demo_checkpoint
from anydev.core.graphs import GraphCaptureError, batch_bucket, context_bucket, pad_decode
from anydev.core.scheduler import Sequence, build_step

BLOCK = 4
# Unequal prompts; at max_model_len 48 they stop after 30, 30, 28, 22 and 30 new tokens. Four run at
# a time (3 of them pad to the bucket of 4), and the fifth is admitted (prefilled) between decode steps.
PROMPTS = [[5, 6, 7, 8, 9], list(range(1, 13)), list(range(20, 40)), list(range(40, 66)), list(range(70, 79))]
LENGTHS = [30, 30, 28, 22, 30]
GREEDY = SamplingParams(max_new_tokens=30)


class EagerGraph:
    """A StepGraph that re-runs the captured Python callable at every replay."""

    made: list["EagerGraph"] = []

    def __init__(self, stream):
        self.stream = stream
        self.forward = None
        self.replays = 0
        EagerGraph.made.append(self)

    def capture(self, forward, share_memory_with=None):
        self.forward = forward
        self.output = forward()
        return self.output

    def replay(self):
        self.output.copy_(self.forward())
        self.replays += 1

    def close(self):
        self.forward = None


@pytest.fixture(autouse=True)
def fresh_graph_log():
    EagerGraph.made = []


def config(tp=1, graphs=True, **changes):
    changes.setdefault("graph_factory", EagerGraph if graphs else None)
    changes.setdefault("max_num_seqs", 4)
    return EngineConfig(tp=tp, max_model_len=48, block_size=BLOCK, use_graphs=graphs, **changes)


def run(engine_config, prompts=PROMPTS, sampling=GREEDY, kv=False):
    """Tokens per prompt, (rows, width, real rows) of each decode step (rank 0), the buckets each rank
    captured, optionally rank 0's KV pool, and the engine's usable KV blocks."""
    with InferEngine(demo_checkpoint(), engine_config) as engine:
        worker, forward, buckets = engine.workers[0], engine.workers[0].forward, []

        def recording(batch, *args):
            if batch.real_rows is not None:
                buckets.append((batch.B, batch.L, batch.real_rows))
            return forward(batch, *args)

        worker.forward = recording
        tokens = [o.token_ids for o in engine.generate_ids(prompts, sampling)]
        pool = engine.kv_cache_to_host(0) if kv else None
        captured = [w.graphs.buckets if w.graphs else None for w in engine.workers]
        return tokens, buckets, captured, pool, engine.num_blocks


@pytest.fixture(scope="module")
def eager_tokens():
    return run(config(graphs=False))[0]


@pytest.mark.parametrize("tp", [1, 2])
def test_graph_decode_gives_the_eager_tokens_with_one_capture_per_bucket(tp, eager_tokens):
    tokens, steps, captured, _, _ = run(config(tp))
    assert tokens == eager_tokens
    assert [len(t) for t in tokens] == LENGTHS                # the sequences finished at different steps
    assert any(real < rows for rows, _, real in steps)        # some steps ran padding rows
    buckets = [(rows, width) for rows, width, _ in steps]
    distinct = list(dict.fromkeys(buckets))                   # in first-use order
    assert {rows for rows, _ in distinct} == {1, 4}           # the batch shrank (3 real rows pad to 4)
    assert len({width for rows, width in distinct if rows == 4}) >= 2   # contexts crossed a bucket boundary
    assert all(ranks_buckets == distinct for ranks_buckets in captured)  # every rank, same buckets, same order
    assert len(EagerGraph.made) == tp * len(distinct)         # captured once per bucket and rank
    assert sum(g.replays for g in EagerGraph.made) == tp * len(buckets)   # every decode step replayed


def test_a_second_generate_replays_the_graphs_it_already_has():
    with InferEngine(demo_checkpoint(), config()) as engine:
        first = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
        made = len(EagerGraph.made)
        second = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
    assert second == first
    assert len(EagerGraph.made) == made


def test_padding_rows_never_touch_real_kv_pages():
    eager_tokens, _, _, eager_pool, num_blocks = run(config(graphs=False, num_blocks=60), kv=True)
    tokens, steps, _, pool, graph_blocks = run(config(num_blocks=60), kv=True)
    assert tokens == eager_tokens
    assert any(real < rows for rows, _, real in steps)
    assert graph_blocks == num_blocks == 60                   # the scratch block comes on top
    slots = num_blocks * BLOCK
    assert pool.shape[2] == slots + BLOCK
    # equal up to rounding: padded steps multiply more rows, which may round differently
    torch.testing.assert_close(pool[:, :, :slots], eager_pool, rtol=1e-4, atol=1e-5)
    scratch = pool[:, :, slots]                               # written by the padding rows
    assert scratch.abs().sum() > 0
    assert torch.count_nonzero(pool[:, :, slots + 1:]) == 0   # the rest of the scratch block: untouched


def test_seeded_sampling_draws_for_the_real_rows_only():
    sampling = SamplingParams(max_new_tokens=20, temperature=0.9, top_k=20, seed=11)
    assert run(config(), sampling=sampling)[0] == run(config(graphs=False), sampling=sampling)[0]


def test_a_backend_without_device_graphs_decodes_eagerly():
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=4, max_model_len=48, block_size=BLOCK)) as engine:
        assert engine.config.use_graphs and not engine.backend.supports("torch_graph")
        assert not engine.uses_graphs and engine.workers[0].graphs is None
        tokens = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
    assert tokens == run(config(graphs=False))[0]


def test_enforce_eager_makes_no_graph_even_with_a_factory():
    with InferEngine(demo_checkpoint(), EngineConfig(use_graphs=False, graph_factory=EagerGraph)) as engine:
        engine.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=4))
        assert not engine.uses_graphs
    assert EagerGraph.made == []


class FailingGraph(EagerGraph):
    def capture(self, forward, share_memory_with=None):
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_failed_capture_names_the_bucket_and_the_way_out():
    with InferEngine(demo_checkpoint(), config(graph_factory=FailingGraph)) as engine:
        with pytest.raises(GraphCaptureError, match=r"1 sequence\(s\) x 16 context.*not permitted.*--enforce-eager"):
            engine.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=4))


# ---- buckets and padding, on the host ----------------------------------------------------------

def test_buckets():
    assert [batch_bucket(n, 32) for n in (1, 2, 3, 5, 17, 32)] == [1, 2, 4, 8, 32, 32]
    assert batch_bucket(5, 6) == 6
    assert [context_bucket(n, 8192) for n in (1, 16, 17, 300, 1024, 1025, 3000)] == [16, 16, 32, 512, 1024, 2048, 3072]
    assert context_bucket(300, 260) == 260


def test_pad_decode_sends_padding_to_the_scratch_slot_only():
    seqs = []
    for index, (prompt_len, blocks) in enumerate([(5, [7, 2, 4]), (2, [3])]):
        seq = Sequence(index, list(range(10, 10 + prompt_len)), 8)
        seq.output = [99]
        seq.assign_blocks(blocks, BLOCK)
        seq.num_cached = prompt_len
        seqs.append(seq)
    batch = build_step(seqs)
    scratch = 40
    padded = pad_decode(batch, 4, 16, scratch)
    assert (padded.B, padded.S, padded.L, padded.N, padded.real_rows) == (4, 1, 16, 4, 2)
    assert torch.equal(padded.write_slots[:2], batch.write_slots)
    assert padded.write_slots[2:].tolist() == [scratch, scratch]
    assert torch.equal(padded.read_slots[:2, :batch.L], batch.read_slots)
    assert np.all(padded.read_slots[:, batch.L:].numpy() == scratch) and np.all(padded.read_slots[2:].numpy() == scratch)
    assert padded.context.tolist() == batch.context.tolist() + [1, 1]
    assert torch.equal(padded.input_ids[:2], batch.input_ids) and torch.equal(padded.positions[:2], batch.positions)
    mask = padded.attention_mask()
    assert torch.equal(mask[:2, ..., :batch.L], batch.attention_mask())
    assert not mask[:2, ..., batch.L:].any()                   # padding positions of real rows: masked
    assert mask[2:, 0, 0].nonzero()[:, 1].tolist() == [0, 0]   # padding rows: the one scratch key
