"""The executor interface: the engine drives any registered executor the same way, and RankLayout
is the one place that says where each rank sits."""
from __future__ import annotations

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.errors import EngineConfigError
from anydev.core.executors.registry import EXECUTORS, register_executor
from anydev.core.executors.threads import ThreadExecutor
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.models.pipeline import RankLayout


class RecordingExecutor(ThreadExecutor):
    """A fourth executor: the threads executor, recording every method it runs on the ranks."""

    name = "recording"

    def __init__(self, config, backend, layout):
        super().__init__(config, backend, layout)
        self.calls: list[str] = []
        self.closed = False

    def run(self, method, *args, sampler_args=None):
        self.calls.append(method)
        return super().run(method, *args, sampler_args=sampler_args)

    def close(self):
        self.closed = True
        return super().close()


def test_a_registered_executor_runs_the_engine_with_no_change_to_it(monkeypatch):
    params = SamplingParams(max_new_tokens=6)
    prompt = [[1, 5, 9, 20]]
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, max_model_len=64)) as engine:
        expected = engine.generate_ids(prompt, params)[0].token_ids
    monkeypatch.setitem(EXECUTORS, "recording", RecordingExecutor)
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, max_model_len=64, executor="recording")) as engine:
        executor = engine.executor
        assert type(executor) is RecordingExecutor and executor.layout == RankLayout(2, 1)
        assert engine.generate_ids(prompt, params)[0].token_ids == expected
    assert executor.calls[0] == "init" and "forward" in executor.calls
    assert executor.closed


def test_register_executor_adds_one_by_its_name_and_refuses_a_clash():
    register_executor(RecordingExecutor)   # gone after the test (tests/conftest.py)
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, max_model_len=64, executor="recording")) as engine:
        assert type(engine.executor) is RecordingExecutor
    register_executor(RecordingExecutor)   # the same class again: nothing changes

    class Impostor(ThreadExecutor):
        name = "recording"

    with pytest.raises(ValueError, match="executor 'recording' is already .*RecordingExecutor"):
        register_executor(Impostor)
    with pytest.raises(TypeError, match="an Executor subclass with a name"):
        register_executor(RankLayout)


def test_an_unknown_executor_is_a_config_error_naming_the_registered_ones():
    with pytest.raises(EngineConfigError, match=r"executor must be one of \('threads', 'mp', 'torchrun'\), got 'ray'"):
        InferEngine(demo_checkpoint(), EngineConfig(executor="ray"))


def test_rank_layout_positions_stages_and_neighbours():
    layout = RankLayout(tp=2, pp=3)
    assert layout.world == 6
    assert [layout.position(r) for r in range(6)] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert [list(layout.stage_ranks(s)) for s in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert layout.sampler == 4
    assert [layout.previous(r) for r in range(6)] == [None, None, 0, 1, 2, 3]
    assert [layout.next(r) for r in range(6)] == [2, 3, 4, 5, None, None]
    assert str(layout) == "tp=2 x pp=3" and str(RankLayout(4)) == "tp=4"
    assert RankLayout(tp=4).sampler == 0 and RankLayout(tp=4).next(0) is None
