"""examples/test_infer.py --model DIR runs a checkpoint of each of the issue's families (llama, qwen3,
qwen3_moe; at tp 2) to the text the Python API gives for the same prompt."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from checkpoints import write_hf_checkpoint

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "test_infer.py"


def load_cli():
    spec = importlib.util.spec_from_file_location("test_infer_families_cli", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_moe"])
def test_a_family_directory_runs_to_the_engines_text(tmp_path, capsys, arch):
    directory = write_hf_checkpoint(tmp_path / arch, arch=arch)
    with InferEngine(directory, EngineConfig()) as engine:
        expected = engine.generate(["Hello world"], SamplingParams(max_new_tokens=5))[0]
    assert load_cli().main(["--model", str(directory), "--tp", "2", "--max-new-tokens", "5",
                            "--prompt", "Hello world"]) == 0
    out = capsys.readouterr().out
    assert f"{arch}, layers=2" in out
    header = f"--- output 0 ({len(expected.token_ids)} tokens, {expected.finish_reason}) ---\n"
    assert header + expected.text + "\n" in out
