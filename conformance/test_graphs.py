"""Device graphs (optional call ``torch_graph``, contract 1.1): a capture records torch work without
running it; a replay equals the same work run eagerly; a replay after the inputs changed computes
from the new inputs. Backends without device graphs skip the group, saying so."""
from __future__ import annotations

import pytest
import torch

from anydev.conformance.support import require_torch_bridge

N = 4096


def require_graphs(backend) -> None:
    from anydev.conformance.emulated_runtime import GRAPHS_NOT_EMULATED, EmulatedRuntime

    require_torch_bridge(backend)
    if isinstance(backend.runtime, EmulatedRuntime):
        pytest.skip(GRAPHS_NOT_EMULATED)
    if not backend.supports("torch_graph"):
        pytest.skip(f"'{backend.name}' does not capture device graphs (the optional call torch_graph, contract 1.1)")


def work(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What the graph records: new tensors from the input, and an in-place update of ``y``."""
    out = torch.sin(x) * 3.0 + x
    y.add_(out)
    return out


def host_input(seed: int) -> torch.Tensor:
    return torch.randn(N, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def graph_setup(backend, device, stream):
    """Device tensors x (input) and y (accumulator) on the stream's device, and a new graph."""
    require_graphs(backend)
    buffers = [device.alloc(N * 4), device.alloc(N * 4)]
    x, y = (b.as_tensor(torch.float32, (N,)) for b in buffers)
    with stream.torch_stream():  # warm-up, as engines do: lazy kernel loading stays out of the capture
        scratch = x.clone()
        work(x, scratch)
    stream.synchronize()
    graph = stream.create_graph()
    yield x, y, graph
    stream.synchronize()
    graph.close()
    for b in buffers:
        b.free()


def fill(stream, tensor: torch.Tensor, values: torch.Tensor) -> None:
    with stream.torch_stream():
        tensor.copy_(values.to(tensor.device))
    stream.synchronize()


def to_host(stream, tensor: torch.Tensor) -> torch.Tensor:
    stream.synchronize()
    with stream.torch_stream():
        host = tensor.to("cpu", copy=True)
    stream.synchronize()
    return host


def test_capture_records_without_running(stream, graph_setup):
    x, y, graph = graph_setup
    fill(stream, x, host_input(1))
    fill(stream, y, torch.zeros(N))
    with graph.capture():
        work(x, y)
    assert bool((to_host(stream, y) == 0).all()), "work recorded in a capture ran at capture time (y changed)"


def test_replay_equals_eager(stream, graph_setup):
    x, y, graph = graph_setup
    first = host_input(2)
    fill(stream, x, first)
    fill(stream, y, torch.zeros(N))
    with graph.capture():
        out = work(x, y)
    graph.replay()
    expected_out = torch.sin(first) * 3.0 + first
    torch.testing.assert_close(to_host(stream, out), expected_out, msg="replay's output differs from eager")
    torch.testing.assert_close(to_host(stream, y), expected_out, msg="replay's in-place update differs from eager")


def test_replay_reads_changed_inputs(stream, graph_setup):
    """Replay twice, the input changed in between (and the in-place update accumulating): each
    replay computes from the inputs as they are then."""
    x, y, graph = graph_setup
    first, second = host_input(3), host_input(4)
    fill(stream, x, first)
    fill(stream, y, torch.zeros(N))
    with graph.capture():
        out = work(x, y)
    graph.replay()
    fill(stream, x, second)
    graph.replay()
    expected_first, expected_second = (torch.sin(v) * 3.0 + v for v in (first, second))
    torch.testing.assert_close(to_host(stream, out), expected_second,
                               msg="after the input changed, replay still gives the old result (replay ignores changed inputs)")
    torch.testing.assert_close(to_host(stream, y), expected_first + expected_second,
                               msg="two replays did not both update y in place")


def wide_work(x: torch.Tensor, acc: torch.Tensor, half: torch.Tensor):
    """What engines capture beyond arithmetic: dtype conversions (to bfloat16 and back, and a copy_
    into a captured bfloat16 buffer), a copy (clone), views (view, transpose, slice), reductions (a sum
    over a dimension and a max over everything) and an in-place update of a captured buffer."""
    rounded = x.to(torch.bfloat16).to(torch.float32)
    half.copy_(x)
    grid = rounded.clone().view(64, 64).t()
    rows = grid.sum(dim=1)
    peak = grid[:, 1:].amax()
    acc[:64].mul_(0.5).add_(rows)
    return rounded, rows, peak


def quarters(seed: int) -> torch.Tensor:
    """Multiples of 1/4 in [-8, 8]: exact in bfloat16, and their sums, maxima and halvings exact in
    float32 on any device, whatever order a reduction adds in."""
    return torch.randint(-32, 33, (N,), generator=torch.Generator().manual_seed(seed)).float() / 4


def test_replay_recomputes_conversions_copies_views_and_reductions(backend, device, stream):
    """Captured once, replayed on one input and again after the input changed: every output (and the
    in-place accumulation, over both replays) equals the same work run eagerly on the host. A graph
    that froze its conversions or copies at capture time would give the first input's values."""
    require_graphs(backend)
    buffers = [device.alloc(N * 4), device.alloc(N * 4), device.alloc(N * 2)]
    x, acc = (b.as_tensor(torch.float32, (N,)) for b in buffers[:2])
    half = buffers[2].as_tensor(torch.bfloat16, (N,))
    graph = None
    try:
        with stream.torch_stream():  # warm-up on scratch copies, outside the capture
            wide_work(x.clone(), acc.clone(), half.clone())
        stream.synchronize()
        graph = stream.create_graph()
        first, second = quarters(5), quarters(6)
        fill(stream, x, first)
        fill(stream, acc, torch.zeros(N))
        with graph.capture():
            outputs = wide_work(x, acc, half)
        graph.replay()
        fill(stream, x, second)
        graph.replay()
        expected_acc, expected_half = torch.zeros(N), torch.empty(N, dtype=torch.bfloat16)
        wide_work(first, expected_acc, expected_half)
        expected = wide_work(second, expected_acc, expected_half)
        for name, got, want in zip(("conversion to bfloat16 and back", "sum over a view", "max over a slice"), outputs, expected):
            torch.testing.assert_close(to_host(stream, got), want, msg=f"{name}: replay after the input changed differs from eager")
        torch.testing.assert_close(to_host(stream, half), expected_half, msg="copy_ into a bfloat16 buffer differs from eager")
        torch.testing.assert_close(to_host(stream, acc), expected_acc, msg="in-place update of a captured buffer differs from eager")
    finally:
        stream.synchronize()
        if graph is not None:
            graph.close()
        for b in buffers:
            b.free()
