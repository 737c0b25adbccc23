"""Parallel init: the engine's ranks initialise concurrently; the KV cache reads back as zeros; init
allocates no host buffer as large as the KV cache; the engine is ready only after the device work
finished (both zero checks fill the cache's memory with a non-zero pattern first, by copies, when it is
allocated); a failing rank raises, naming itself, and leaves no thread and no device memory behind.

The engine runs the embedded demo model with a KV cache of 64 MiB .. 1 GiB per rank (see
``engine_support.kv_num_blocks``), on ``--tp`` ranks (default: the device count).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
import torch

from anydev.conformance.engine_support import engine_config, engine_ranks, kv_block_bytes, kv_num_blocks, start_engine
from anydev.conformance.host_memory import HostPeak, NotMeasurable, device_memory_is_host_memory

PHASES = ("device setup", "weights", "kv alloc", "kv zero", "sync", "ready")  # the engine's, in order
MiB = 1 << 20
# A failed init may leave the device's free memory a little lower than before: allocator granularity
# (2 MiB pages on GPUs) and runtime-internal pools (lazily loaded kernels, collective-library
# buffers). The KV cache of these checks is at least 64 MiB per rank, so leaking it fails; a leak of
# the demo model's weights alone (a few MiB per rank) is left to the engine's unit tests.
LEAK_TOLERANCE = 32 * MiB


def intervals(timeline) -> dict[int, tuple[float, float]]:
    """Each rank's init interval: from its first phase's start to its last phase's end."""
    out: dict[int, tuple[float, float]] = {}
    for record in timeline:
        start, end = out.get(record.rank, (record.start, record.end))
        out[record.rank] = (min(start, record.start), max(end, record.end))
    return out


def shared_time(spans: dict[int, tuple[float, float]]) -> float:
    """Seconds during which every rank was initialising at once (<= 0: never all at once)."""
    return min(end for _, end in spans.values()) - max(start for start, _ in spans.values())


def init_timeline(backend, tp: int, num_blocks: int, **settings):
    from anydev.core import format_timeline

    engine = start_engine(engine_config(backend, tp, num_blocks=num_blocks, **settings))
    try:
        return engine.timeline, format_timeline(engine.timeline)
    finally:
        engine.close()


DIRTY = 0xA5  # the pattern the zero checks fill memory with before the engine gets it


def fill_with_pattern(device, buf, nbytes: int | None = None) -> None:
    """Fill ``buf`` with :data:`DIRTY` by host-to-device copies (not a memset: a broken memset must
    not be able to blind the check that the engine's zeroing memset works)."""
    nbytes = buf.nbytes if nbytes is None else nbytes
    pattern = np.full(min(nbytes, 16 * MiB), DIRTY, dtype=np.uint8)
    stream = device.create_stream()
    try:
        for offset in range(0, nbytes, pattern.size):
            chunk = min(pattern.size, nbytes - offset)
            stream.memcpy_async(buf, pattern, chunk, dst_offset=offset)
        stream.synchronize()
    finally:
        stream.close()


def dirty_device_memory(backend, tp: int, nbytes: int, cycles: int = 2) -> None:
    """Fill ``nbytes`` on each device with :data:`DIRTY` and free it, ``cycles`` times, so that an
    allocator that hands the same memory back gives the KV cache non-zero bytes unless the engine
    zeroes them."""
    for index in range(tp):
        device = backend.device(index)
        for _ in range(cycles):
            buf = device.alloc(nbytes)
            fill_with_pattern(device, buf)
            buf.free()
    backend.device(0).set_current()


@contextlib.contextmanager
def allocations_dirtied(min_bytes: int):
    """Every device allocation of at least ``min_bytes`` made inside the block (the engine's KV
    caches) is filled with :data:`DIRTY` before its caller gets it: whether freed memory reads back
    as zeros (fresh pages of a host-memory backend) cannot hide an engine that zeroes too little."""
    from anydev.plugin_api.objects.device import Device

    original = Device.alloc

    def alloc_dirtied(device, nbytes):
        buf = original(device, nbytes)
        if nbytes >= min_bytes:
            fill_with_pattern(device, buf)
        return buf

    Device.alloc = alloc_dirtied
    try:
        yield
    finally:
        Device.alloc = original


@contextlib.contextmanager
def ranks_meet_before_weights(tp: int, timeout_s: float):
    """Make every rank wait, once its weight loading starts, until all ``tp`` ranks have got there.

    Ranks that initialise concurrently all pass this rendezvous, so their timelines overlap whatever
    the machine's load; ranks initialised one after another cannot (the first waits for ranks that
    have not started) and fail after ``timeout_s``. It wraps the engine's per-rank weight loading.
    """
    from anydev.core.rank import rank_worker
    barrier = threading.Barrier(tp, timeout=timeout_s)
    original = rank_worker.RankWorker._load_weights

    def load_weights_after_rendezvous(worker):
        barrier.wait()
        return original(worker)

    rank_worker.RankWorker._load_weights = load_weights_after_rendezvous
    try:
        yield
    finally:
        rank_worker.RankWorker._load_weights = original


def test_ranks_initialise_concurrently(backend, request, monkeypatch):
    tp = engine_ranks(backend, request, minimum=2)
    blocks = kv_num_blocks(backend, tp)
    with ranks_meet_before_weights(tp, timeout_s=60):
        parallel, parallel_table = init_timeline(backend, tp, blocks)
    spans = intervals(parallel)
    assert sorted(spans) == list(range(tp)), f"timeline ranks {sorted(spans)}, expected 0..{tp - 1}"
    assert shared_time(spans) > 0, f"the {tp} ranks never initialised at the same time:\n{parallel_table}"
    # A one-rank-after-another init (serial_init.py) cannot pass the rendezvous: the check tells the two apart.
    from anydev.conformance.serial_init import HOST_ZERO_WORKER, SerialExecutor
    from anydev.core import EngineInitError
    from anydev.core.executors.registry import EXECUTORS

    monkeypatch.setitem(EXECUTORS, SerialExecutor.name, SerialExecutor)
    with ranks_meet_before_weights(tp, timeout_s=1), pytest.raises(EngineInitError, match="BrokenBarrierError"):
        init_timeline(backend, tp, blocks, executor="serial", worker_cls=HOST_ZERO_WORKER)


def engine_over_dirty_memory(backend, tp: int):
    """An engine whose KV cache is allocated over dirtied memory: device memory written and freed
    before init, and every allocation as large as the cache filled with a pattern when made."""
    blocks = kv_num_blocks(backend, tp)
    kv_bytes = blocks * kv_block_bytes(tp)
    dirty_device_memory(backend, tp, nbytes=kv_bytes + 16 * MiB)
    with allocations_dirtied(min_bytes=kv_bytes):
        return start_engine(engine_config(backend, tp, num_blocks=blocks))


def test_kv_cache_reads_back_as_zeros(backend, request):
    """The KV cache's memory holds a non-zero pattern before the engine zeroes it (filled when it is
    allocated, and the device memory dirtied and freed before init), so every byte must be zeroed by
    init, whatever freed memory reads back as."""
    tp = engine_ranks(backend, request)
    engine = engine_over_dirty_memory(backend, tp)
    try:
        for rank in range(tp):
            cache = engine.kv_cache_to_host(rank)
            raw = cache.reshape(-1).view(torch.uint8)
            assert raw.numel() == engine.kv_cache_bytes[rank]
            nonzero = int(torch.count_nonzero(raw))
            assert nonzero == 0, f"rank {rank}: {nonzero} of {raw.numel()} KV cache bytes are not zero after init"
    finally:
        engine.close()


def test_ready_only_after_device_work_finished(backend, request):
    """Each rank's phases run in order, 'sync' ends before 'ready', and the KV cache read right after
    the constructor returns, on a fresh stream that waits for nothing, is already all zeros."""
    tp = engine_ranks(backend, request)
    engine = engine_over_dirty_memory(backend, tp)
    try:
        for rank in range(tp):  # read first: nothing else may give the device time to catch up
            device = backend.device(rank)
            stream = device.create_stream()
            kv = engine.workers[rank].kv.buffer
            out = torch.empty(kv.nbytes, dtype=torch.uint8)
            stream.memcpy_async(out, kv)
            stream.synchronize()
            stream.close()
            assert int(torch.count_nonzero(out)) == 0, f"rank {rank}: the KV cache was not zero yet when init returned"
        for rank in range(tp):
            mine = {r.phase: r for r in engine.timeline if r.rank == rank}
            assert list(mine) == list(PHASES), f"rank {rank} recorded phases {list(mine)}, expected {list(PHASES)}"
            ordered = all(mine[a].end <= mine[b].start for a, b in zip(PHASES, PHASES[1:]))
            assert ordered, f"rank {rank}: phases overlap or run out of order"
            assert engine.kv_zero_device_ms[rank] is not None and engine.kv_zero_device_ms[rank] >= 0
    finally:
        engine.close()
        backend.device(0).set_current()


def test_init_allocates_no_host_buffer_as_large_as_the_kv_cache(backend, request):
    """Host memory peak during init, minus what the devices themselves hold when their memory is host
    memory (the cpu backend), stays below one rank's KV cache: the cache is zeroed on the device,
    never staged through a host buffer of zeros."""
    tp = engine_ranks(backend, request)
    config = engine_config(backend, tp, num_blocks=kv_num_blocks(backend, tp))
    start_engine(engine_config(backend, tp, num_blocks=8)).close()  # warm up: imports, contexts, pools
    try:
        host_backed = device_memory_is_host_memory(backend.device(0))
        free_before = [backend.device(i).memory_info().free for i in range(tp)]
        with HostPeak() as peak:
            engine = start_engine(config)
    except NotMeasurable as exc:
        pytest.skip(f"host memory peak not measurable here: {exc}")
    try:
        kv_bytes = min(engine.kv_cache_bytes)
        device_held = sum(before - backend.device(i).memory_info().free for i, before in enumerate(free_before))
    finally:
        engine.close()
        backend.device(0).set_current()
    in_rss = device_held if host_backed else 0  # device memory that is resident host memory
    host_rss = peak.rss - in_rss
    if not host_backed:  # a GPU, or host memory the probe could not see grow (docs/writing-a-backend.md)
        held = "device memory 0.0 MiB: the probe's fresh 96 MiB device buffer did not grow the RSS, so none is subtracted"
    elif device_held <= 0:
        held = "device memory 0.0 MiB: memory_info().free did not drop over init, so none is subtracted"
    else:
        held = f"device memory {in_rss / MiB:.1f} MiB, the drop of memory_info().free over init"
    detail = (f"RSS peak +{peak.rss / MiB:.1f} MiB (of which {held}), "
              f"Python/numpy peak {peak.python / MiB:.1f} MiB, KV cache {kv_bytes / MiB:.1f} MiB per rank")
    assert host_rss < kv_bytes, f"init used a host buffer about as large as the KV cache: {detail}"
    assert peak.python < kv_bytes, f"init allocated a numpy/Python buffer as large as the KV cache: {detail}"


@pytest.mark.parametrize("phase", PHASES)
def test_failing_rank_raises_and_leaves_nothing_behind(backend, request, phase):
    from anydev.core import EngineInitError
    from anydev.core.timeline import PHASES as ENGINE_PHASES

    assert phase in ENGINE_PHASES, f"the engine has no phase {phase!r}: {ENGINE_PHASES}"
    tp = engine_ranks(backend, request)
    rank = tp - 1  # the last rank: the others have made progress and hold memory when it fails
    blocks = kv_num_blocks(backend, tp)
    start_engine(engine_config(backend, tp, num_blocks=blocks)).close()  # warm up pools and contexts
    threads_before = set(threading.enumerate())
    free_before = [backend.device(i).memory_info().free for i in range(tp)]

    with pytest.raises(EngineInitError) as info:
        start_engine(engine_config(backend, tp, num_blocks=blocks), fail_at=(rank, phase))
    error = info.value
    assert (error.rank, error.phase) == (rank, phase), f"the error names rank {error.rank} '{error.phase}'"
    assert f"rank {rank}" in str(error), f"the message does not name the rank: {error}"

    left = [t.name for t in set(threading.enumerate()) - threads_before if t.is_alive()]
    assert not left, f"threads still running after the failed init: {left}"
    for index, before in enumerate(free_before):
        leaked = before - backend.device(index).memory_info().free
        assert leaked <= LEAK_TOLERANCE, f"device {index}: {leaked / MiB:.1f} MiB still allocated after the failed init"
    backend.device(0).set_current()
