"""``ANYDEV_DEVICE`` picks the backend when a program names none; an explicit device wins; an
unknown name is an error naming the variable, never a quiet fallback to cpu."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.plugin_api import UnknownBackendError, get_registry

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "test_infer.py"
needs_hostdev = pytest.mark.skipif("hostdev" not in get_registry().plugins,
                                   reason="the example out-of-tree backend (hostdev) is not installed")


def run_test_infer(argv):
    spec = importlib.util.spec_from_file_location("test_infer_env_module", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


@needs_hostdev
def test_the_engine_runs_on_the_backend_the_variable_names(monkeypatch):
    monkeypatch.setenv("ANYDEV_DEVICE", "hostdev")
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=1)) as engine:
        assert engine.backend.name == "hostdev"
        assert engine.generate(["hi"], SamplingParams(max_new_tokens=2))[0].token_ids


def test_an_explicit_device_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv("ANYDEV_DEVICE", "warp")
    with InferEngine(demo_checkpoint(), EngineConfig(device="cpu", max_num_seqs=1)) as engine:
        assert engine.backend.name == "cpu"


def test_an_unknown_name_in_the_variable_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("ANYDEV_DEVICE", "warp")
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'warp' \(named by \$ANYDEV_DEVICE\)"):
        InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=1))


@needs_hostdev
def test_test_infer_uses_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("ANYDEV_DEVICE", "hostdev")
    assert run_test_infer(["--max-new-tokens", "2"]) == 0
    out = capsys.readouterr().out
    assert "device: hostdev (host CPU (hostdev example backend)) x 1 rank(s)" in out and "hostdev tp=1 vs cpu tp=1" in out


def test_test_infer_refuses_an_unknown_name_in_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("ANYDEV_DEVICE", "warp")
    assert run_test_infer(["--max-new-tokens", "2"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: unknown backend 'warp' (named by $ANYDEV_DEVICE)")
