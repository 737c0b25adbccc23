"""Many generate calls at TP=2 on the cpu backend hold nothing: the tensors each collective uses are
released once it has run (no host sync needed), and close gives back every byte of device memory."""
from __future__ import annotations

import gc
import os
import warnings

import pytest
import torch

from anydev.conformance.support import run_ranks
from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.plugin_api import Stream, load_backend

CALLS = 200
WARMUP = 20


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _live_tensors() -> int:
    gc.collect()
    with warnings.catch_warnings():   # isinstance() on some torch module proxies warns
        warnings.simplefilter("ignore", FutureWarning)
        return sum(1 for obj in gc.get_objects() if isinstance(obj, torch.Tensor))


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read from /proc (Linux only)")
def test_hundreds_of_generate_calls_at_tp2_hold_no_memory():
    devices = [load_backend("cpu").device(i) for i in range(2)]
    free_before = [d.memory_info().free for d in devices]
    sampling = SamplingParams(max_new_tokens=6)
    with InferEngine(demo_checkpoint(), EngineConfig(device="cpu", tp=2, max_num_seqs=2)) as engine:
        def generate():
            return [o.token_ids for o in engine.generate_ids([[0, 40, 41], [0, 50]], sampling)]

        expected = generate()
        for _ in range(WARMUP):
            generate()
        tensors, free = _live_tensors(), [d.memory_info().free for d in devices]
        for _ in range(CALLS):
            assert generate() == expected
        grown = _live_tensors() - tensors
        # Each call runs ~50 collectives: holding their tensors would add ~100 tensors a call.
        assert grown < 4 * Stream.FENCE_EVERY, f"{grown} more live tensors after {CALLS} calls"
        assert [d.memory_info().free for d in devices] == free
        # RSS over a second round: the first can grow the allocator's arenas once (more so beside
        # another xdist worker), a leak grows every round alike.
        rss = _rss_bytes()
        for _ in range(CALLS):
            assert generate() == expected
        assert _rss_bytes() - rss < 16 * 2**20, f"RSS grew {(_rss_bytes() - rss) / 2**20:.1f} MiB over {CALLS} calls"
    assert [d.memory_info().free for d in devices] == free_before


def test_a_failed_stream_reports_its_error_at_synchronize_not_at_a_later_enqueue():
    import numpy as np

    from anydev.plugin_api import AnydevError

    backend = load_backend("cpu")
    comms = backend.create_communicators([backend.device(0), backend.device(1)])
    outcome = [None, None]

    def rank(r: int) -> None:
        device = comms[r].device
        device.set_current()
        stream, buf = device.create_stream(), device.alloc(4096)
        try:
            comms[r].all_reduce(buf, stream=stream, count=16 + r, dtype="float32")   # the ranks disagree: it fails
            for batch in range(3):   # each batch fences its copies; the next batch queries that fence
                for _ in range(Stream.FENCE_EVERY):
                    stream.memcpy_async(buf, np.zeros(64, dtype=np.uint8))
                reached = stream.record()
                with pytest.raises(AnydevError):   # the failed work's error, once the fence has completed
                    reached.synchronize()
                reached.close()
            try:
                stream.synchronize()
            except AnydevError as exc:
                outcome[r] = exc
        except Exception as exc:   # an enqueue that raised the stream's error
            outcome[r] = f"raised at enqueue: {exc!r}"
        finally:
            buf.free()
            stream.close()

    try:
        run_ranks(2, rank, "2 ranks", timeout=120)
    finally:
        for comm in comms:
            comm.close()
    assert all(isinstance(o, AnydevError) for o in outcome), outcome
