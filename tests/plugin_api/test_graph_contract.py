"""Contract 1.1's optional device graphs: the user-facing ``Graph`` (from ``stream.create_graph()``),
the cpu backend's refusal, and the CUDA-like bridge's capture sequence (on a fake torch module)."""
from __future__ import annotations

import contextlib

import pytest

from anydev.backends.cpu.runtime import CpuRuntime
from anydev.backends.cudalike.torch_bridge import StreamGraph
from anydev.plugin_api import Backend, ClosedError, InvalidArgumentError, NotSupportedError, TorchGraph, load_backend


class RecordingGraph(TorchGraph):
    """A runtime-level graph that logs what the wrapper asks of it (the body runs as-is)."""

    def __init__(self, log: list, stream: int):
        self.log, self.stream = log, stream

    @contextlib.contextmanager
    def capture(self, share_memory_with=None):
        self.log.append(("begin", self.stream, share_memory_with))
        yield
        self.log.append(("end", self.stream))

    def replay(self) -> None:
        self.log.append(("replay", self.stream))

    def close(self) -> None:
        self.log.append(("close", self.stream))


class GraphCpuRuntime(CpuRuntime):
    def __init__(self):
        super().__init__()
        self.log = []

    def torch_graph(self, stream: int, index: int) -> TorchGraph:
        return RecordingGraph(self.log, stream)


@pytest.fixture
def graph_backend():
    backend = Backend(GraphCpuRuntime())
    stream = backend.device(0).create_stream()
    yield backend, stream
    stream.close()
    backend.close()


def test_cpu_has_no_device_graphs():
    backend = load_backend("cpu")
    assert not backend.supports("torch_graph")
    with backend.device(0).create_stream() as stream, pytest.raises(NotSupportedError, match="torch_graph"):
        stream.create_graph()


def test_capture_then_replay_goes_to_the_runtime_on_the_stream(graph_backend):
    backend, stream = graph_backend
    assert backend.supports("torch_graph")
    graph = stream.create_graph()
    assert not graph.captured
    with graph.capture():
        pass
    graph.replay()
    graph.replay()
    assert graph.captured
    assert backend.runtime.log == [("begin", stream.handle, None), ("end", stream.handle),
                                   ("replay", stream.handle), ("replay", stream.handle)]


def test_close_twice_is_safe_and_use_after_close_raises(graph_backend):
    backend, stream = graph_backend
    graph = stream.create_graph()
    with graph.capture():
        pass
    graph.close()
    graph.close()
    assert [entry for entry in backend.runtime.log if entry[0] == "close"] == [("close", stream.handle)]
    with pytest.raises(ClosedError):
        graph.replay()
    with pytest.raises(ClosedError), graph.capture():
        pass


def test_replay_before_capture_and_a_second_capture_are_refused(graph_backend):
    _, stream = graph_backend
    graph = stream.create_graph()
    with pytest.raises(InvalidArgumentError, match="capture"):
        graph.replay()
    with graph.capture():
        pass
    with pytest.raises(InvalidArgumentError, match="already captured"), graph.capture():
        pass


def test_a_failed_capture_leaves_nothing_to_replay(graph_backend):
    _, stream = graph_backend
    graph = stream.create_graph()
    with pytest.raises(RuntimeError, match="inside"), graph.capture():
        raise RuntimeError("inside the capture")
    assert not graph.captured
    with pytest.raises(InvalidArgumentError):
        graph.replay()


def test_shared_memory_needs_a_captured_graph_and_passes_the_runtime_graph(graph_backend):
    backend, stream = graph_backend
    first, second = stream.create_graph(), stream.create_graph()
    with pytest.raises(InvalidArgumentError, match="captured graph"), second.capture(share_memory_with=first):
        pass
    third = stream.create_graph()
    with first.capture():
        pass
    with third.capture(share_memory_with=first):
        pass
    assert backend.runtime.log[-2] == ("begin", stream.handle, first._graph)


def test_a_graph_on_a_closed_stream_refuses_to_replay(graph_backend):
    _, stream = graph_backend
    graph = stream.create_graph()
    with graph.capture():
        pass
    stream.close()
    with pytest.raises(ClosedError):
        graph.replay()


# ---- the CUDA-like bridge's StreamGraph, on a fake torch.cuda -----------------------------------

class FakeCudaGraph:
    def __init__(self, log, fail_end=False):
        self.log, self.fail_end = log, fail_end

    def capture_begin(self, *pool, capture_error_mode):
        self.log.append(("capture_begin", pool, capture_error_mode))

    def capture_end(self):
        self.log.append(("capture_end",))
        if self.fail_end:
            raise RuntimeError("capture invalidated")

    def replay(self):
        self.log.append(("replay",))

    def reset(self):
        self.log.append(("reset",))

    def pool(self):
        return ("pool", id(self))


class FakeAccelerator:
    def __init__(self, log):
        self.log = log

    @contextlib.contextmanager
    def stream(self, stream):
        self.log.append(("enter", stream.name))
        try:
            yield
        finally:
            self.log.append(("exit", stream.name))


class FakeStream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def synchronize(self):
        self.log.append(("synchronize", self.name))


def test_stream_graph_captures_thread_local_on_its_stream_and_shares_pools():
    log = []
    accelerator = FakeAccelerator(log)
    first = StreamGraph(accelerator, FakeCudaGraph(log), FakeStream(log, "s"))
    with first.capture():
        log.append(("body",))
    first.replay()
    assert log == [("synchronize", "s"), ("enter", "s"), ("capture_begin", (), "thread_local"), ("body",),
                   ("capture_end",), ("exit", "s"), ("enter", "s"), ("replay",), ("exit", "s")]
    log.clear()
    second = StreamGraph(accelerator, FakeCudaGraph(log), FakeStream(log, "s"))
    with second.capture(share_memory_with=first):
        pass
    assert ("capture_begin", (first._graph.pool(),), "thread_local") in log
    second.close()
    assert log[-1] == ("reset",)


def test_stream_graph_ends_a_failed_capture_and_raises_the_body_error():
    log = []
    graph = StreamGraph(FakeAccelerator(log), FakeCudaGraph(log, fail_end=True), FakeStream(log, "s"))
    with pytest.raises(ValueError, match="body failed") as info, graph.capture():
        raise ValueError("body failed")
    assert ("capture_end",) in log and log[-1] == ("exit", "s")
    assert any("capture invalidated" in note for note in info.value.__notes__)
