"""Decode through per-bucket graphs captured at start-up, on the cpu backend (no device graphs there):
the engine's ranks are built from a test RankWorker (``EngineConfig.worker_cls``) whose graphs are
"eager graphs": a capture runs the forward once and a replay re-runs it on the bucket's static buffers. So everything around
the real device graph is checked here: captures at start-up only (one per batch bucket and rank),
padding to buckets, the persistent input copy, padding rows that write no KV, lockstep over TP ranks,
sampling of the real rows only."""
from __future__ import annotations

import contextlib

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.rank.graphs import GraphCaptureError, batch_bucket, batch_buckets
from anydev.core.models.batch import pad_decode
from anydev.core.rank.rank_worker import RankWorker
from anydev.core.sched.scheduler import Sequence, build_step

BLOCK = 4
# Unequal prompts; at max_model_len 48 they stop after 30, 30, 28, 22 and 30 new tokens. Four run at
# a time (3 of them pad to the bucket of 4), and the fifth is admitted (prefilled) between decode steps.
PROMPTS = [[5, 6, 7, 8, 9], list(range(1, 13)), list(range(20, 40)), list(range(40, 66)), list(range(70, 79))]
LENGTHS = [30, 30, 28, 22, 30]
GREEDY = SamplingParams(max_new_tokens=30)


class EagerGraph:
    """A test graph: capture() lets the forward run, replay() re-runs it through the engine's
    ``replay_eagerly``."""

    made: list["EagerGraph"] = []

    def __init__(self, stream, replay_eagerly):
        self.stream = stream
        self.replay_eagerly = replay_eagerly
        self.replays = 0
        EagerGraph.made.append(self)

    @contextlib.contextmanager
    def capture(self, share_memory_with=None):
        yield self

    def replay(self):
        self.replay_eagerly()
        self.replays += 1

    def close(self):
        self.replay_eagerly = None


class FailingGraph(EagerGraph):
    @contextlib.contextmanager
    def capture(self, share_memory_with=None):
        raise RuntimeError("operation not permitted when stream is capturing")
        yield


class EagerGraphWorker(RankWorker):
    """A rank whose graphs are :class:`EagerGraph` s: graphs on a backend that has none."""

    graph = EagerGraph

    @classmethod
    def supports_graphs(cls, backend) -> bool:
        return True

    def new_graph(self, replay_eagerly):
        return self.graph(self.stream, replay_eagerly)


class FailingGraphWorker(EagerGraphWorker):
    graph = FailingGraph


def graphs_of(worker: type[RankWorker]) -> str:
    """The ``worker_cls`` of a test worker class of this module."""
    return f"{__name__}:{worker.__qualname__}"


@pytest.fixture(autouse=True)
def fresh_graph_log():
    EagerGraph.made = []


def config(tp=1, graphs=True, worker=EagerGraphWorker, **changes):
    changes.setdefault("max_num_seqs", 4)
    changes.setdefault("piecewise_max_tokens", 0)   # decode graphs only (tests/core/rank/test_piecewise_graphs.py: the rest)
    return EngineConfig(tp=tp, max_model_len=48, block_size=BLOCK, use_graphs=graphs, worker_cls=graphs_of(worker),
                        **changes)


def run(engine_config, prompts=PROMPTS, sampling=GREEDY, kv=False):
    """Tokens per prompt, (rows, real rows) of each decode step (rank 0), the graphs made at start-up
    and in all, the buckets each rank captured, optionally rank 0's KV pool."""
    with InferEngine(demo_checkpoint(), engine_config) as engine:
        at_start = len(EagerGraph.made)
        worker, forward, steps = engine.workers[0], engine.workers[0].forward, []

        def recording(batch, *args):
            if batch.real_rows is not None:
                steps.append((batch.B, batch.real_rows))
            return forward(batch, *args)

        worker.forward = recording
        tokens = [o.token_ids for o in engine.generate_ids(prompts, sampling)]
        pool = engine.kv_cache_to_host(0) if kv else None
        captured = [w.graphs.buckets if w.graphs else None for w in engine.workers]
        return dict(tokens=tokens, steps=steps, at_start=at_start, made=len(EagerGraph.made), captured=captured,
                    pool=pool)


@pytest.fixture(scope="module")
def eager_tokens():
    return run(config(graphs=False))["tokens"]


@pytest.mark.parametrize("tp", [1, 2])
def test_graph_decode_gives_the_eager_tokens_with_every_capture_at_start_up(tp, eager_tokens):
    result = run(config(tp))
    assert result["tokens"] == eager_tokens
    assert [len(t) for t in result["tokens"]] == LENGTHS       # the sequences finished at different steps
    steps = result["steps"]
    assert any(real < rows for rows, real in steps)            # some steps ran padding rows
    assert {rows for rows, _ in steps} == {1, 4}               # the batch shrank (3 real rows pad to 4)
    assert result["at_start"] == tp * len(batch_buckets(4))     # every bucket on every rank, at start-up
    assert result["made"] == result["at_start"]                 # no capture while generating
    assert all(buckets == [4, 2, 1] for buckets in result["captured"])   # largest first, every rank
    assert sum(g.replays for g in EagerGraph.made) == tp * len(steps)    # every decode step replayed


def test_a_second_generate_captures_nothing():
    with InferEngine(demo_checkpoint(), config()) as engine:
        first = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
        made = len(EagerGraph.made)
        second = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
        assert engine.workers[0].graphs.captures == len(batch_buckets(4))
    assert second == first
    assert len(EagerGraph.made) == made


def test_padding_rows_never_touch_the_kv_pages():
    eager = run(config(graphs=False, num_blocks=60), kv=True)
    graphs = run(config(num_blocks=60), kv=True)
    assert graphs["tokens"] == eager["tokens"]
    assert any(real < rows for rows, real in graphs["steps"])
    # the same slots written (padding rows write none), with the same values up to rounding: padded
    # steps multiply more rows, which may round differently
    assert torch.equal(graphs["pool"] != 0, eager["pool"] != 0)
    torch.testing.assert_close(graphs["pool"], eager["pool"], rtol=1e-4, atol=1e-5)


def test_seeded_sampling_draws_for_the_real_rows_only():
    sampling = SamplingParams(max_new_tokens=20, temperature=0.9, top_k=20, seed=11)
    assert run(config(), sampling=sampling)["tokens"] == run(config(graphs=False), sampling=sampling)["tokens"]


def test_a_backend_without_device_graphs_decodes_eagerly():
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=4, max_model_len=48, block_size=BLOCK)) as engine:
        assert engine.config.use_graphs and not engine.backend.supports("torch_graph")
        assert not engine.uses_graphs and engine.workers[0].graphs is None
        tokens = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
    assert tokens == run(config(graphs=False))["tokens"]


def test_enforce_eager_makes_no_graph_even_with_a_factory():
    with InferEngine(demo_checkpoint(), EngineConfig(use_graphs=False, worker_cls=graphs_of(EagerGraphWorker))) as engine:
        engine.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=4))
        assert not engine.uses_graphs
    assert EagerGraph.made == []


def test_a_failed_capture_fails_the_start_naming_the_bucket_and_the_way_out():
    with pytest.raises(GraphCaptureError, match=r"bucket of 4 sequence\(s\).*not permitted.*--enforce-eager"):
        InferEngine(demo_checkpoint(), config(worker=FailingGraphWorker))
    assert all(g.replay_eagerly is None for g in EagerGraph.made)   # the failed graphs were closed


# ---- buckets and padding, on the host ----------------------------------------------------------

def test_buckets():
    assert batch_buckets(32) == [1, 2, 4, 8, 16, 32]
    assert batch_buckets(6) == [1, 2, 4, 6]
    assert batch_buckets(1) == [1]
    assert [batch_bucket(n, 32) for n in (1, 2, 3, 5, 17, 32)] == [1, 2, 4, 8, 32, 32]
    assert batch_bucket(5, 6) == 6


def test_pad_decode_gives_padding_rows_no_slot_and_no_context():
    seqs = []
    for index, (prompt_len, blocks) in enumerate([(5, [7, 2, 4]), (2, [3])]):
        seq = Sequence(index, list(range(10, 10 + prompt_len)), 8)
        seq.output = [99]
        seq.assign_blocks(blocks, BLOCK)
        seq.num_cached = prompt_len
        seqs.append(seq)
    batch = build_step(seqs, block_size=BLOCK)
    padded = pad_decode(batch, 4, 16)
    assert (padded.T, padded.B, padded.M, padded.real_rows, padded.num_tokens) == (4, 4, 16, 2, 2)
    assert torch.equal(padded.slot_mapping[:2], batch.slot_mapping)
    assert padded.slot_mapping[2:].tolist() == [-1, -1]
    assert padded.seq_lens.tolist() == batch.seq_lens.tolist() + [0, 0]
    assert torch.equal(padded.block_tables[:2, :batch.M], batch.block_tables)
    assert not padded.block_tables[:, batch.M:].any() and not padded.block_tables[2:].any()
    assert padded.cu_seqlens_q.tolist() == [0, 1, 2, 3, 4] and padded.last_index.tolist() == [0, 1, 2, 3]
    assert torch.equal(padded.input_ids[:2], batch.input_ids) and torch.equal(padded.positions[:2], batch.positions)
    with pytest.raises(ValueError, match="does not fit"):
        pad_decode(batch, 1, 16)
    direct = build_step(seqs, max_blocks=16, block_size=BLOCK, pad_to=4)   # what the engine does: one pack
    assert direct.real_rows == 2 and torch.equal(direct.packed, padded.packed)


# ---- real captures: the cpu backend's device graphs (ANYDEV_CPU_GRAPHS=1) ------------------------

@pytest.mark.parametrize("tp", [1, 2])
def test_real_device_graphs_give_the_eager_tokens_captured_at_start_up_only(cpu_with_graphs, tp, eager_tokens):
    prompts, sampling = PROMPTS, GREEDY
    with InferEngine(demo_checkpoint(), config(tp)) as engine:
        assert engine.uses_graphs and engine.backend is cpu_with_graphs
        captured = [w.graphs.captures for w in engine.workers]
        assert captured == [len(batch_buckets(4))] * tp                 # every bucket, every rank, at start-up
        tokens = [o.token_ids for o in engine.generate_ids(prompts, sampling)]
        assert [w.graphs.captures for w in engine.workers] == captured   # none while generating
        assert engine.last_stats.decode_steps > 0
    assert tokens == eager_tokens
