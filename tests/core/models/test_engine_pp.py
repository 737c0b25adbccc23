"""Pipeline parallelism on the cpu backend's virtual devices: PP=2, PP=3 (uneven stages) and
TP=2 x PP=2 give TP=1's greedy and seeded tokens on a batch of prompts whose decode steps are split
into micro-batches, on rank threads and on rank processes (executor="mp", where the sampler keeping
the seeded generators is another process); each stage holds only its layers; bad settings are
typed errors."""
from __future__ import annotations

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.micro_batches import micro_batch_bounds
from anydev.core.models.pipeline import PipelineConfigError, RankLayout, stages
from anydev.core.rank.rank_worker import RankWorker
from checkpoints import write_hf_checkpoint

PROMPTS = ["Hello, world!", "the model of the device is", "hi", "tell me about pipeline parallel inference"]
SEEDS = (7, 8)


def seeded(engine, seed: int) -> list[list[int]]:
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0, top_k=50, top_p=0.95, seed=seed)
    return [o.token_ids for o in engine.generate(PROMPTS, sampling)]


def seeded_sequences(engine) -> list[int]:
    """The ids of the sequences whose generators the sampler keeps (asked on its thread or process)."""
    return engine.sampler.submit(engine.sampler.seeded_sequences).result()


def check_seeded(engine, tp1_seeded) -> None:
    """Each seed gives TP=1's tokens; the sampler drops the generators of the sequences that ended."""
    assert [seeded(engine, seed) for seed in SEEDS] == tp1_seeded
    assert 0 < len(seeded_sequences(engine)) <= len(PROMPTS)   # the last call's: dropped at the next step
    engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2))
    assert seeded_sequences(engine) == []


@pytest.fixture(scope="module")
def tp1_tokens():
    with InferEngine(demo_checkpoint(), EngineConfig(tp=1)) as engine:
        return [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=20))]


@pytest.fixture(scope="module")
def tp1_seeded():
    """TP=1 on rank threads: the tokens of each seed of SEEDS (which differ: the sampling is random)."""
    with InferEngine(demo_checkpoint(), EngineConfig(tp=1)) as engine:
        tokens = [seeded(engine, seed) for seed in SEEDS]
    assert tokens[0] != tokens[1]
    return tokens


@pytest.fixture
def micro_batch_sizes(monkeypatch):
    """The micro-batch row counts of every stage step the sampler ran (recorded on the way through)."""
    seen: list[list[int]] = []
    original = RankWorker.forward_stage

    def recording(self, micro_batches, *args):
        if self.samples:
            seen.append([b.B for b in micro_batches])
        return original(self, micro_batches, *args)

    monkeypatch.setattr(RankWorker, "forward_stage", recording)
    return seen


@pytest.mark.parametrize("tp,pp", [(1, 2), (2, 2), (1, 3)])
def test_pp_gives_the_tp1_tokens_with_micro_batches(tp, pp, tp1_tokens, micro_batch_sizes):
    with InferEngine(demo_checkpoint(), EngineConfig(tp=tp, pp=pp)) as engine:
        assert len(engine.workers) == tp * pp and not engine.uses_graphs
        assert engine.sampler is engine.workers[(pp - 1) * tp]
        tokens = [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=20))]
    assert tokens == tp1_tokens
    # The prefill ran whole; the decode steps of all four prompts ran as pp micro-batches.
    assert micro_batch_sizes[0] == [4]
    assert {2: [2, 2], 3: [1, 1, 2]}[pp] in micro_batch_sizes[1:], micro_batch_sizes


def test_seeded_sampling_with_pp_matches_tp1(tp1_seeded):
    with InferEngine(demo_checkpoint(), EngineConfig(pp=2)) as engine:
        check_seeded(engine, tp1_seeded)


def test_untied_lm_head_and_biases_with_pp(tmp_path):
    # qwen2: q/k/v biases and an lm_head of its own, loaded by the last stage only.
    directory = write_hf_checkpoint(tmp_path / "qwen2", arch="qwen2", num_hidden_layers=3)
    prompts = [[5, 9, 33, 70, 12], [101, 7], list(range(40, 61))]
    results = []
    for pp in (1, 2):
        with InferEngine(directory, EngineConfig(pp=pp, block_size=4)) as engine:
            results.append([o.token_ids for o in engine.generate_ids(prompts, SamplingParams(max_new_tokens=12))])
            if pp == 2:
                first, last = (w.weights.tensors for w in engine.workers)
                assert "lm_head.weight" in last and "lm_head.weight" not in first
    assert results[0] == results[1]


def test_each_stage_holds_only_its_layers_weights_and_kv():
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, pp=2)) as engine:
        for worker in engine.workers:
            stage = worker.stage
            layers = {int(n.split(".")[2]) for n in worker.weights.tensors if n.startswith("model.layers.")}
            assert layers == set(stage.layers) == ({0, 1} if stage.is_first else {2, 3})
            assert ("model.norm.weight" in worker.weights.tensors) == stage.is_last
            assert worker.kv.layout.num_layers == 2
        assert [w.samples for w in engine.workers] == [False, False, True, False]


def test_stages_split_the_layers_contiguously():
    assert [list(s.layers) for s in stages(4, 3)] == [[0, 1], [2], [3]]
    assert [list(s.layers) for s in stages(7, 2)] == [[0, 1, 2, 3], [4, 5, 6]]
    assert [(s.is_first, s.is_last) for s in stages(3, 3)] == [(True, False), (False, False), (False, True)]


def test_micro_batches_split_decode_steps_only():
    assert micro_batch_bounds(5, decode=True, pp=2) == [(0, 2), (2, 5)]
    assert micro_batch_bounds(1, decode=True, pp=2) == [(0, 1)]
    assert micro_batch_bounds(3, decode=True, pp=4) == [(0, 1), (1, 2), (2, 3)]
    assert micro_batch_bounds(6, decode=False, pp=2) == [(0, 6)]


def test_more_stages_than_layers_is_a_config_error():
    with pytest.raises(PipelineConfigError, match="pp=5 needs at least 5 layers.*has 4"):
        InferEngine(demo_checkpoint(), EngineConfig(pp=5))


@pytest.mark.parametrize("pp", [0, -1, "2", True])
def test_pp_must_be_a_positive_integer(pp):
    with pytest.raises(PipelineConfigError, match="pp must be an integer >= 1"):
        InferEngine(demo_checkpoint(), EngineConfig(pp=pp))


def test_tp_times_pp_beyond_the_devices_is_a_config_error():
    with pytest.raises(PipelineConfigError, match=r"tp=4 x pp=4 needs 16 devices, but backend 'cpu' has \d+"):
        InferEngine(demo_checkpoint(), EngineConfig(tp=4, pp=4))


class _NoSendBackend:
    name = "nosend"

    def device_count(self) -> int:
        return 8

    def supports(self, call: str) -> bool:
        return call != "send"


def test_pp_on_a_backend_without_send_recv_is_a_config_error():
    with pytest.raises(PipelineConfigError, match="'nosend' does not offer.*contract 1.3"):
        RankLayout(tp=1, pp=2).check_devices(_NoSendBackend())
    RankLayout(tp=2, pp=1).check_devices(_NoSendBackend())   # no stages to connect: fine


@pytest.mark.parametrize("tp,pp", [(1, 2), (2, 2)])
def test_pp_on_rank_processes_gives_the_tp1_tokens(tp, pp, tp1_tokens, tp1_seeded):
    """executor="mp": a process per rank, the stages' send/recv through the cpu backend's gloo groups;
    the sampler (tp rank 0 of the last stage) is another process than rank 0, and seeded requests'
    generators live there."""
    with InferEngine(demo_checkpoint(), EngineConfig(tp=tp, pp=pp, executor="mp")) as engine:
        assert len(engine.executor.group._children) == tp * pp - 1
        tokens = [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=20))]
        assert {r.rank for r in engine.timeline} == set(range(tp * pp))
        check_seeded(engine, tp1_seeded)
    assert tokens == tp1_tokens
