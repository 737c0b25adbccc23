"""Engine start-up on the cpu backend: the KV cache is zeroed on the device (one memset, one sync),
ranks start together, the timeline is complete, and a failing rank stops everyone and frees
everything, raising an error that names the rank and the phase."""
from __future__ import annotations

import ctypes
import threading

import pytest
import torch

from anydev.core import PHASES, EngineClosedError, EngineConfig, EngineConfigError, EngineInitError, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.conformance.faults import failing_worker
from anydev.conformance.serial_init import HOST_ZERO_WORKER, SerialExecutor
from anydev.core.executors.registry import EXECUTORS
from anydev.core.rank.rank_worker import RankWorker
from anydev.plugin_api import OutOfMemoryError, Stream, load_backend

LAYERS = demo_checkpoint().config.num_hidden_layers
#: The init before parallel init (anydev.conformance.serial_init): ranks one after another, each
#: zeroing its KV cache from host zeros; and "sequential": ranks one after another, each zeroing as
#: parallel init does (one memset).
INITS = {"parallel": {}, "serial": dict(executor="serial", worker_cls=HOST_ZERO_WORKER),
         "sequential": dict(executor="serial")}


@pytest.fixture(autouse=True)
def serial_executor(monkeypatch):
    """The serial executor registered for each test (and gone after it)."""
    monkeypatch.setitem(EXECUTORS, SerialExecutor.name, SerialExecutor)


@pytest.fixture
def cpu():
    return load_backend("cpu")


@pytest.fixture
def dirty_malloc(cpu, monkeypatch):
    """Make every device allocation start as 0xAB bytes, so only real zeroing yields zeros."""
    original = cpu.runtime.malloc

    def malloc(nbytes):
        ptr = original(nbytes)
        ctypes.memset(ptr, 0xAB, nbytes)
        return ptr

    monkeypatch.setattr(cpu.runtime, "malloc", malloc)


def free_bytes(cpu, count: int = 4) -> list[int]:
    return [cpu.device(i).memory_info().free for i in range(count)]


def thread_ids() -> set[int]:
    return {t.ident for t in threading.enumerate()}


def test_dirty_malloc_really_dirties(cpu, dirty_malloc):
    buffer = cpu.device(0).alloc(64)
    try:
        assert set(buffer.as_tensor().tolist()) == {0xAB}
    finally:
        buffer.free()


@pytest.mark.parametrize("init", ["parallel", "serial"])
@pytest.mark.parametrize("tp", [1, 2])
def test_kv_cache_reads_back_as_zeros_after_init(cpu, dirty_malloc, init, tp):
    with InferEngine(demo_checkpoint(), EngineConfig(tp=tp, num_blocks=8, **INITS[init])) as engine:
        for rank in range(tp):
            kv = engine.kv_cache_to_host(rank)
            assert kv.shape == (LAYERS, 2, 8 * 16, 2 // tp, 32)
            assert torch.count_nonzero(kv) == 0
            assert torch.count_nonzero(engine.workers[rank].weights.tensors["model.norm.weight"]) > 0


def _count_calls(monkeypatch, name: str) -> list:
    calls = []
    original = getattr(Stream, name)

    def spy(self, *args, **kwargs):
        calls.append((self, args, kwargs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Stream, name, spy)
    return calls


def test_parallel_init_zeroes_each_kv_pool_with_one_memset_and_synchronizes_once(monkeypatch):
    memsets, syncs = _count_calls(monkeypatch, "memset_async"), _count_calls(monkeypatch, "synchronize")
    copies = _count_calls(monkeypatch, "memcpy_async")
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, num_blocks=8)) as engine:
        kv_buffers = {id(w.kv.buffer) for w in engine.workers}
        weight_copies = len(engine.workers[0].weights.offsets) * 2
        assert {id(args[0]) for _, args, _ in memsets} == kv_buffers
        assert len(memsets) == 2                     # one memset per rank, the whole pool
        assert len(syncs) == 2                       # one synchronize per rank
        assert len(copies) == weight_copies          # only weights go host→device, no zeros


def test_serial_init_zeroes_through_host_copies_with_a_sync_per_layer(monkeypatch):
    memsets, syncs = _count_calls(monkeypatch, "memset_async"), _count_calls(monkeypatch, "synchronize")
    copies = _count_calls(monkeypatch, "memcpy_async")
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, num_blocks=8, **INITS["serial"])) as engine:
        weight_copies = len(engine.workers[0].weights.offsets) * 2
        assert memsets == []
        assert len(copies) == weight_copies + 2 * LAYERS     # a host-zeros copy per layer per rank
        assert len(syncs) == 2 * LAYERS + 2                  # a sync per layer, then the final one


@pytest.mark.parametrize("settings, kv_zero", [(dict(worker_cls=HOST_ZERO_WORKER), "host"),
                                               (dict(executor="serial"), "memset")])
def test_the_kv_zeroing_can_be_crossed_with_the_init_mode_for_the_benchmark(monkeypatch, settings, kv_zero):
    memsets, copies = _count_calls(monkeypatch, "memset_async"), _count_calls(monkeypatch, "memcpy_async")
    config = EngineConfig(tp=2, num_blocks=8, **settings)
    with InferEngine(demo_checkpoint(), config) as engine:
        weight_copies = len(engine.workers[0].weights.offsets) * 2
    if kv_zero == "host":
        assert memsets == [] and len(copies) == weight_copies + 2 * LAYERS
    else:
        assert len(memsets) == 2 and len(copies) == weight_copies


def test_parallel_init_creates_every_worker_before_waiting_for_any(monkeypatch):
    events = []
    original_init, original_run = RankWorker.__init__, RankWorker.init

    def init(self, setup, *args):
        events.append(("created", setup.rank))
        original_init(self, setup, *args)

    def run(self):
        original_run(self)
        events.append(("ready", self.rank))

    monkeypatch.setattr(RankWorker, "__init__", init)
    monkeypatch.setattr(RankWorker, "init", run)
    with InferEngine(demo_checkpoint(), EngineConfig(tp=4, num_blocks=8)):
        pass
    assert [e for e in events[:4]] == [("created", r) for r in range(4)]
    assert sorted(e for e in events[4:]) == [("ready", r) for r in range(4)]


def test_serial_init_runs_the_ranks_one_after_another():
    with InferEngine(demo_checkpoint(), EngineConfig(tp=4, num_blocks=8, **INITS["serial"])) as engine:
        records = engine.timeline
    for rank in range(1, 4):
        previous_end = max(r.end for r in records if r.rank == rank - 1)
        assert min(r.start for r in records if r.rank == rank) >= previous_end


def test_sequential_init_runs_each_rank_alone_as_parallel_mode_does(monkeypatch):
    """The benchmark's 'each rank alone': ranks one after another, each zeroing with one memset."""
    memsets = _count_calls(monkeypatch, "memset_async")
    with InferEngine(demo_checkpoint(), EngineConfig(tp=4, num_blocks=8, **INITS["sequential"])) as engine:
        records = engine.timeline
        assert {id(args[0]) for _, args, _ in memsets} == {id(w.kv.buffer) for w in engine.workers}
    assert len(memsets) == 4
    for rank in range(1, 4):
        previous_end = max(r.end for r in records if r.rank == rank - 1)
        assert min(r.start for r in records if r.rank == rank) >= previous_end


def test_timeline_has_every_phase_of_every_rank_in_order():
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, num_blocks=8)) as engine:
        records = engine.timeline
    for rank in range(2):
        mine = [r for r in records if r.rank == rank]
        assert [r.phase for r in mine] == list(PHASES)
        for before, after in zip(mine, mine[1:]):
            assert before.start <= before.end <= after.start <= after.end


@pytest.mark.parametrize("phase", PHASES)
def test_a_failing_rank_stops_everyone_and_frees_everything(cpu, phase):
    free_before, threads_before = free_bytes(cpu), thread_ids()
    with pytest.raises(EngineInitError) as info:
        InferEngine(demo_checkpoint(), EngineConfig(tp=4, num_blocks=8, worker_cls=failing_worker(2, phase)))
    error = info.value
    assert (error.rank, error.phase) == (2, phase)
    assert str(error).startswith(f"rank 2 failed during '{phase}': RuntimeError: injected fault")
    assert thread_ids() == threads_before
    assert not [t for t in threading.enumerate() if t.name.startswith(("anydev-rank", "anydev-cpu-stream"))]
    assert free_bytes(cpu) == free_before


def test_a_failing_rank_in_serial_mode_frees_the_ranks_before_it(cpu):
    free_before, threads_before = free_bytes(cpu), thread_ids()
    with pytest.raises(EngineInitError, match="rank 1 failed during 'sync'"):
        InferEngine(demo_checkpoint(), EngineConfig(tp=4, num_blocks=8, executor="serial",
                                                    worker_cls=failing_worker(1, "sync")))
    assert thread_ids() == threads_before
    assert free_bytes(cpu) == free_before


def test_a_device_out_of_memory_names_the_rank_and_phase(cpu, monkeypatch):
    original = cpu.runtime.malloc
    calls = {0: 0, 1: 0}

    def malloc(nbytes):
        device = cpu.runtime.get_device()
        calls[device] = calls.get(device, 0) + 1
        if device == 1 and calls[device] == 2:   # rank 1: weights fit, the KV cache does not
            raise OutOfMemoryError("cpu", "malloc", 2, "out of memory", f"{nbytes} bytes do not fit")
        return original(nbytes)

    monkeypatch.setattr(cpu.runtime, "malloc", malloc)
    free_before = free_bytes(cpu)
    with pytest.raises(EngineInitError, match="rank 1 failed during 'kv alloc': OutOfMemoryError") as info:
        InferEngine(demo_checkpoint(), EngineConfig(tp=2, num_blocks=8))
    assert isinstance(info.value.__cause__, OutOfMemoryError)
    assert free_bytes(cpu) == free_before


def test_a_kv_cache_larger_than_memory_is_a_config_error_saying_what_fits(cpu):
    free_before = free_bytes(cpu)
    with pytest.raises(EngineConfigError, match=r"at most \d+ blocks of 16 tokens fit") as info:
        InferEngine(demo_checkpoint(), EngineConfig(num_blocks=10**7))
    assert "\n" not in str(info.value)
    assert free_bytes(cpu) == free_before


def test_close_frees_memory_and_joins_threads(cpu):
    free_before, threads_before = free_bytes(cpu), thread_ids()
    engine = InferEngine(demo_checkpoint(), EngineConfig(tp=2))
    assert free_bytes(cpu) != free_before
    engine.generate(["hi"])
    engine.close()
    engine.close()   # safe twice
    assert free_bytes(cpu) == free_before
    assert thread_ids() == threads_before
    with pytest.raises(EngineClosedError, match="closed"):
        engine.generate(["hi"])


def test_default_kv_size_is_capped_by_max_num_seqs_times_context():
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=3, max_model_len=100, block_size=16)) as engine:
        assert engine.num_blocks == 3 * 7   # ceil(100 / 16) = 7 blocks per sequence
