"""EngineConfig validation: every bad setting is one EngineConfigError that names it."""
from __future__ import annotations

import pytest

from anydev.core import EngineConfig, EngineConfigError, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.conformance.faults import failing_worker
from anydev.core.executors.base import RankPlan
from anydev.core.rank.rank_worker import RankSetup
from anydev.plugin_api import UnknownBackendError


@pytest.mark.parametrize("changes, message", [
    (dict(tp=0), "tp must be an integer >= 1"),
    (dict(dtype="float8"), "dtype 'float8' is not supported"),
    (dict(worker_cls="RankWorker"), "worker_cls must be 'package.module:Class', got 'RankWorker'"),
    (dict(worker_cls="anydev.no_such_module:Worker"), "worker_cls 'anydev.no_such_module:Worker' cannot be loaded"),
    (dict(worker_cls="anydev.core.engine:InferEngine"), "not a subclass of anydev.core.rank.rank_worker:RankWorker"),
    (dict(block_size=0), "block_size must be an integer >= 1"),
    (dict(max_num_seqs=0), "max_num_seqs must be an integer >= 1"),
    (dict(num_blocks=0), "num_blocks must be an integer >= 1"),
    (dict(memory_fraction=0.0), r"memory_fraction must be in \(0, 1\]"),
    (dict(memory_fraction=1.5), r"memory_fraction must be in \(0, 1\]"),
    (dict(max_model_len=1), "max_model_len must be an integer >= 2"),
    (dict(max_model_len=10**6), "exceeds the model's context of 1024 tokens"),
    (dict(kernels="fast"), "kernels must be one of"),
])
def test_bad_settings_are_config_errors(changes, message):
    with pytest.raises(EngineConfigError, match=message) as info:
        InferEngine(demo_checkpoint(), EngineConfig(**changes))
    assert "\n" not in str(info.value)


def test_a_bad_fault_injection_phase_is_a_config_error():
    with pytest.raises(EngineConfigError, match="fail_at phase must be one of"):
        InferEngine(demo_checkpoint(), EngineConfig(worker_cls=failing_worker(0, "warp drive")))


@pytest.mark.parametrize("production", [EngineConfig, RankPlan, RankSetup])
def test_the_test_seams_are_not_in_the_production_objects(production):
    fields = set(production.__dataclass_fields__)
    assert not fields & {"graph_factory", "fail_at", "kv_zero", "serial_zero", "init_mode"}


def test_an_unknown_device_names_the_known_backends():
    with pytest.raises(UnknownBackendError, match="known backends: .*cpu"):
        InferEngine(demo_checkpoint(), EngineConfig(device="warp"))


@pytest.mark.parametrize("dtype, expected", [(None, "float32"), ("bf16", "bfloat16"), ("float16", "float16")])
def test_dtype_defaults_to_float32_on_cpu_and_can_be_chosen(dtype, expected):
    with InferEngine(demo_checkpoint(), EngineConfig(dtype=dtype, num_blocks=8)) as engine:
        assert str(engine.dtype) == f"torch.{expected}"
        assert str(engine.workers[0].weights.tensors["model.norm.weight"].dtype) == f"torch.{expected}"
        assert engine.generate(["hi"])[0].token_ids
