"""Device graphs of the cpu backend (ANYDEV_CPU_GRAPHS=1): stream work inside a capture is recorded
with the torch ops, in order, and runs only at replay; host reads inside a capture are refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from anydev.backends.cpu.runtime import CpuGraphRuntime
from anydev.plugin_api import Backend, InvalidArgumentError


@pytest.fixture
def device():
    backend = Backend(CpuGraphRuntime())
    yield backend.device(0)
    backend.close()


def test_stream_work_and_torch_ops_are_recorded_in_order_and_run_at_replay(device):
    stream = device.create_stream()
    buf = device.alloc(64)
    t = buf.as_tensor(torch.uint8, (64,))
    stream.memset_async(buf, 1)
    stream.synchronize()
    graph = stream.create_graph()
    with graph.capture():
        stream.memset_async(buf, 5)  # recorded, then the torch op reads its result at replay
        t.mul_(2)
    out = np.empty(64, dtype=np.uint8)
    stream.memcpy_async(out, buf)
    stream.synchronize()
    assert (out == 1).all(), "the capture ran its work"
    graph.replay()
    graph.replay()
    stream.memcpy_async(out, buf)
    stream.synchronize()
    assert (out == 10).all(), f"replay gave {out[0]}, expected memset 5 then doubled"
    graph.close()
    buf.free()
    stream.close()


def test_a_host_read_inside_a_capture_is_refused(device):
    stream = device.create_stream()
    buf = device.alloc(16)
    t = buf.as_tensor(torch.float32, (4,))
    graph = stream.create_graph()
    with pytest.raises(InvalidArgumentError, match="cannot be recorded"):
        with graph.capture():
            (t + 1).sum().item()
    graph.close()
    buf.free()
    stream.close()
