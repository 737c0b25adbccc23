"""Tensor parallelism on the cpu backend's virtual devices: TP=2 and TP=4 give TP=1's tokens."""
from __future__ import annotations

import threading

import pytest
import torch

from anydev.core import EngineConfig, EngineConfigError, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.loading.random_weights import llama_config, random_checkpoint
from checkpoints import write_hf_checkpoint

PROMPTS = ["Hello, world!", "the model of the device is", "hi", "tell me about tensor parallel inference"]


@pytest.fixture(scope="module")
def demo_tokens():
    with InferEngine(demo_checkpoint(), EngineConfig(tp=1)) as engine:
        return [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=24))]


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_gives_the_tp1_tokens(tp, demo_tokens):
    # The demo has 4 heads over 2 KV heads: tp=4 also exercises replicated KV heads.
    with InferEngine(demo_checkpoint(), EngineConfig(tp=tp)) as engine:
        assert len(engine.workers) == tp
        tokens = [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=24))]
    assert tokens == demo_tokens


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_serial_init_gives_the_same_tokens(tp, demo_tokens, monkeypatch):
    from anydev.conformance.serial_init import HOST_ZERO_WORKER, SerialExecutor
    from anydev.core.executors.registry import EXECUTORS

    monkeypatch.setitem(EXECUTORS, SerialExecutor.name, SerialExecutor)
    config = EngineConfig(tp=tp, executor="serial", worker_cls=HOST_ZERO_WORKER)   # the init before parallel init
    with InferEngine(demo_checkpoint(), config) as engine:
        tokens = [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=24))]
    assert tokens == demo_tokens


def test_tp_with_qkv_bias_and_kv_heads_split(tmp_path):
    # qwen2 (q/k/v biases), 4 heads over 2 KV heads: tp=2 splits the KV heads, one per rank.
    directory = write_hf_checkpoint(tmp_path / "qwen2", arch="qwen2")
    prompts = [[5, 9, 33, 70, 12], [101, 7], list(range(40, 61))]
    results = []
    for tp in (1, 2):
        with InferEngine(directory, EngineConfig(tp=tp, block_size=4)) as engine:
            results.append([o.token_ids for o in engine.generate_ids(prompts, SamplingParams(max_new_tokens=16))])
    assert results[0] == results[1]


def test_tp_sampling_with_a_seed_matches_tp1():
    sampling = SamplingParams(max_new_tokens=16, temperature=0.8, top_k=50, top_p=0.9, seed=7)
    results = []
    for tp in (1, 2):
        with InferEngine(demo_checkpoint(), EngineConfig(tp=tp)) as engine:
            results.append([o.token_ids for o in engine.generate(PROMPTS, sampling)])
    assert results[0] == results[1]


def test_tp_that_does_not_divide_the_heads_is_a_config_error():
    with pytest.raises(EngineConfigError, match="does not divide the model's 4 attention heads"):
        InferEngine(demo_checkpoint(), EngineConfig(tp=3))


def test_tp_beyond_the_device_count_is_a_config_error():
    config = llama_config(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                          num_attention_heads=16, num_key_value_heads=16)
    with pytest.raises(EngineConfigError, match=r"tp=16 needs 16 devices, but backend 'cpu' has \d+"):
        InferEngine(random_checkpoint(config), EngineConfig(tp=16))


def test_kv_heads_that_neither_divide_nor_are_divided_by_tp_is_a_config_error():
    config = llama_config(vocab_size=64, hidden_size=96, intermediate_size=96, num_hidden_layers=1,
                          num_attention_heads=6, num_key_value_heads=3)
    with pytest.raises(EngineConfigError, match="KV heads"):
        InferEngine(random_checkpoint(config), EngineConfig(tp=2))


def test_each_rank_holds_its_shard_of_the_weights():
    checkpoint = demo_checkpoint()
    with InferEngine(checkpoint, EngineConfig(tp=2)) as engine:
        name = "model.layers.0.self_attn.q_proj.weight"
        full = checkpoint.load(name)
        for rank, worker in enumerate(engine.workers):
            shard = worker.weights.tensors[name]
            rows = full.shape[0] // 2
            assert torch.equal(shard, full[rank * rows:(rank + 1) * rows])
        down = checkpoint.load("model.layers.0.mlp.down_proj.weight")
        cols = down.shape[1] // 2
        assert torch.equal(engine.workers[1].weights.tensors["model.layers.0.mlp.down_proj.weight"], down[:, cols:])


def test_a_rank_whose_step_raises_stops_every_rank_with_its_error(monkeypatch):
    """Rank 1's step raises before its first all_reduce; rank 0 waits for it there. The engine
    aborts the communicators (contract 1.4), so rank 0 is freed: the step raises rank 1's error, the
    next one says the ranks were stopped, and close joins every rank thread."""
    from anydev.core.executors.group_errors import RankFailedError
    from anydev.plugin_api import load_backend

    monkeypatch.setattr(load_backend("cpu").runtime, "collective_timeout_s", 600.0)   # only the abort frees rank 0
    engine = InferEngine(demo_checkpoint(), EngineConfig(tp=2))
    rank_threads = []
    try:
        engine.add_request([5, 9, 33, 70, 12], SamplingParams(max_new_tokens=50, ignore_eos=True))
        engine.step()
        rank_threads = [t for t in threading.enumerate() if t.name.startswith("anydev-rank")]

        def broken(*args):
            raise RuntimeError("injected fault in rank 1's step")

        monkeypatch.setattr(engine.workers[1], "forward", broken)
        with pytest.raises(RuntimeError, match="injected fault in rank 1's step"):
            engine.step()
        with pytest.raises(RankFailedError, match="rank 1 failed: an earlier step raised RuntimeError"):
            engine.step()
    finally:
        closer = threading.Thread(target=engine.close, daemon=True)
        closer.start()
        closer.join(60)   # a hang detector: close is quick once rank 0 is free
    assert not closer.is_alive(), "close() hangs: rank 0's thread is still blocked in the all_reduce rank 1 never joined"
    assert len(rank_threads) == 2 and not any(t.is_alive() for t in rank_threads)


@pytest.mark.parametrize("pp", [1, 2])
def test_close_destroys_every_rank_communicator_at_once(pp):
    """A collective library's destroy may wait until every rank of the communicator destroys its own
    (NCCL's can, within a node): the engine destroys them all at once. Here each destroy waits, as
    such a library's would, until every communicator's destroy has begun; one after another, they
    never meet."""
    engine = InferEngine(demo_checkpoint(), EngineConfig(tp=2, pp=pp))
    barrier = threading.Barrier(len(engine.communicators), timeout=10)
    for comm in engine.communicators:
        def destroy_with_peers(destroy=comm.close):
            barrier.wait()   # raises BrokenBarrierError when the others do not come
            destroy()

        comm.close = destroy_with_peers
    engine.close()   # raises the first error met while releasing
