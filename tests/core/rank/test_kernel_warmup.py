"""EngineConfig.warm_kernels: each rank runs a padding step of every graph bucket and token bucket in
warm-up threads while its weights load, calling the kernels with the shapes its captures then call
them with; the tokens are the same with and without it; a failing warm-up is an init error of its own
phase that frees every rank. On the cpu backend's recording device graphs."""
from __future__ import annotations

import threading

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core import engine_startup
from anydev.core.errors import EngineInitError
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.rank.kernel_warmup import KernelWarmupError
from anydev.plugin_api.kernels import KERNEL_NAMES

PROMPTS = [[5, 6, 7, 8, 9], list(range(1, 13)), list(range(20, 40))]
GREEDY = SamplingParams(max_new_tokens=8)


def config(**changes):
    return EngineConfig(**{"max_num_seqs": 4, "max_model_len": 64, "block_size": 4, "max_num_batched_tokens": 24,
                           "warm_kernels": True, **changes})


class RecordingKernels:
    """The engine's kernel set, each kernel call recorded as (thread name, kernel, its activations'
    shape, its weight's shape for a projection); ``fail_in_warmup`` makes calls on warm-up threads raise."""

    def __init__(self, kernels, fail_in_warmup: bool = False):
        self._kernels = kernels
        self.calls: list[tuple[str, tuple]] = []
        self._lock = threading.Lock()
        self._fail = fail_in_warmup

    def __getattr__(self, name):
        value = getattr(self._kernels, name)
        if name not in KERNEL_NAMES:
            return value

        def call(*args, **kwargs):
            thread = threading.current_thread().name
            if self._fail and "warmup" in thread:
                raise RuntimeError("injected compile failure")
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            key = (name, tuple(tensors[0].shape))
            if name in ("linear", "quantized_linear"):
                key += (tuple(args[1].shape),)
            with self._lock:
                self.calls.append((thread, key))
            return value(*args, **kwargs)

        return call


class Installed(list):
    """The :class:`RecordingKernels` of each engine started since; ``fail``: those of the next ones fail."""
    fail = False


@pytest.fixture
def recording(monkeypatch):
    made = Installed()

    def select(backend, mode, real=engine_startup.select_kernels):
        made.append(RecordingKernels(real(backend, mode), fail_in_warmup=made.fail))
        return made[-1]

    monkeypatch.setattr(engine_startup, "select_kernels", select)
    return made


def run(engine_config, recording):
    """The tokens, the capture timeline, and the calls made during start-up (before the first step)."""
    with InferEngine(demo_checkpoint(), engine_config) as engine:
        records, startup_calls = list(engine.capture_timeline), list(recording[-1].calls)
        return [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)], records, startup_calls


@pytest.mark.parametrize("tp", [1, 2])
def test_the_warm_up_calls_every_kernel_shape_the_captures_call_and_keeps_the_tokens(cpu_with_graphs, recording, tp):
    warm_tokens, records, calls = run(config(tp=tp), recording)
    warmed = {key for thread, key in calls if "warmup" in thread}
    first_capture = next(i for i, (thread, _) in enumerate(calls) if "warmup" not in thread)
    assert all("warmup" in thread for thread, _ in calls[:first_capture])   # before any rank's own step
    captured = {key for thread, key in calls if "warmup" not in thread}
    assert warmed and captured - warmed == set()
    assert sum(r.phase == "kernel compile" and r.rank == 0 for r in records) > 0

    cold_tokens, _, cold_calls = run(config(tp=tp, warm_kernels=False), recording)
    assert cold_calls and not any("warmup" in thread for thread, _ in cold_calls)
    assert warm_tokens == cold_tokens


def test_a_failing_warm_up_is_an_init_error_of_its_phase_naming_the_way_out(cpu_with_graphs, recording):
    recording.fail = True
    try:
        with pytest.raises(EngineInitError) as caught:
            InferEngine(demo_checkpoint(), config())
    finally:
        recording.fail = False
    assert caught.value.phase == "kernel compile"
    assert isinstance(caught.value.cause, KernelWarmupError)
    assert "leave out --kernel-warmup" in str(caught.value)
    run(config(), recording)     # the failed start freed everything: the next engine starts


def test_no_warm_up_without_graphs(recording):
    run(config(use_graphs=False), recording)
    assert recording[0].calls and not any("warmup" in thread for thread, _ in recording[0].calls)
