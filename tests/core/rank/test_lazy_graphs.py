"""EngineConfig.lazy_graphs: start-up captures the smallest decode and token buckets only; a step that
needs another bucket runs its padded step eagerly, and the engine captures the others between steps
(on every rank); the tokens are those of the eager engine and of the engine that captures everything
at start-up; on the cpu backend's recording device graphs."""
from __future__ import annotations

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.rank.graphs import batch_buckets
from anydev.core.rank.piecewise import token_buckets
from anydev.core.timeline import CAPTURE_PHASES

# Prompts of 5 to 26 tokens in chunks of up to 24 (token buckets 16 and 24), four running at a time.
PROMPTS = [[5, 6, 7, 8, 9], list(range(1, 13)), list(range(20, 40)), list(range(40, 66)), list(range(70, 79))]
GREEDY = SamplingParams(max_new_tokens=12)


def config(**changes):
    return EngineConfig(**{"max_num_seqs": 4, "max_model_len": 64, "block_size": 4, "max_num_batched_tokens": 24,
                           **changes})


def generate(engine_config, capture_later: bool = True):
    """Tokens per prompt, and per rank the decode and token buckets captured at start-up and at the end
    (``capture_later`` False: the buckets start-up left out are never captured)."""
    with InferEngine(demo_checkpoint(), engine_config) as engine:
        def captured():
            return [(sorted(w.graphs.buckets) if w.graphs else [], sorted(w.pieces.buckets) if w.pieces else [])
                    for w in engine.workers]

        at_start, capture_records = captured(), list(engine.capture_timeline)
        if not capture_later:
            engine.pending_graphs.clear()
        tokens = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
        return dict(tokens=tokens, at_start=at_start, at_end=captured(), records=capture_records)


@pytest.fixture(scope="module")
def eager_tokens():
    return generate(config(use_graphs=False))["tokens"]


@pytest.mark.parametrize("tp", [1, 2])
def test_lazy_graphs_capture_the_smallest_buckets_at_start_up_and_give_the_same_tokens(cpu_with_graphs, tp,
                                                                                       eager_tokens):
    lazy = generate(config(tp=tp, lazy_graphs=True))
    assert lazy["at_start"] == [([1], [16])] * tp
    assert lazy["at_end"] == [(batch_buckets(4), token_buckets(24))] * tp   # the rest captured between steps
    assert lazy["tokens"] == eager_tokens


def test_steps_whose_bucket_is_not_captured_run_eagerly_with_the_same_tokens(cpu_with_graphs, eager_tokens):
    never = generate(config(lazy_graphs=True), capture_later=False)
    assert never["at_end"] == never["at_start"] == [([1], [16])]
    assert never["tokens"] == eager_tokens


def test_capture_next_graph_captures_the_pending_buckets_one_at_a_time(cpu_with_graphs):
    with InferEngine(demo_checkpoint(), config(lazy_graphs=True)) as engine:
        pending = list(engine.pending_graphs)
        assert pending == [(2, None), (4, None), (None, 24)]
        for _ in pending:
            assert engine.capture_next_graph()
        assert not engine.capture_next_graph() and not engine.pending_graphs
        assert sorted(engine.workers[0].graphs.buckets) == batch_buckets(4)
        assert sorted(engine.workers[0].pieces.buckets) == token_buckets(24)


def test_every_bucket_is_captured_at_start_up_by_default_and_each_capture_is_timed(cpu_with_graphs, eager_tokens):
    full = generate(config())
    assert full["at_start"] == [(batch_buckets(4), token_buckets(24))]
    assert full["at_end"] == full["at_start"]
    assert full["tokens"] == eager_tokens
    graphs = len(batch_buckets(4)) + len(token_buckets(24)) * (demo_checkpoint().config.num_hidden_layers + 1)
    for phase, count in zip(CAPTURE_PHASES, (graphs, graphs)):   # one eager run and one capture per graph
        assert sum(r.phase == phase for r in full["records"]) == count
    assert all(r.end >= r.start for r in full["records"])
