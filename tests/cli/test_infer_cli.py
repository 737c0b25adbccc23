"""examples/test_infer.py: the demo runs end to end and checks itself against the cpu reference;
bad input is one ``error:`` line and exit code 2, never a traceback."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints import write_hf_checkpoint

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "test_infer.py"


def load_cli():
    spec = importlib.util.spec_from_file_location("test_infer_cli_module", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_demo_runs_and_matches_transformers():
    result = run_script("--max-new-tokens", "8", "--batch-size", "2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "cpu reference: this run is the reference" in out    # no self-comparison claimed as a match
    assert "tokens match HF transformers: yes" in out
    assert "device setup" in out and "kv zero" in out          # the init timeline table
    assert out.count("--- output") == 2
    assert "prefill:" in out and "decode:" in out and "tokens/s" in out
    assert "Traceback" not in result.stderr


def test_demo_with_tensor_parallel_ranks_matches_the_cpu_reference(capsys):
    assert load_cli().main(["--tp", "2", "--max-new-tokens", "8", "--temperature", "0.7", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "device: cpu (host CPU (virtual devices)) x 2 rank(s)" in out
    assert "tokens match the cpu reference: yes (greedy, float32: cpu tp=2 vs cpu tp=1)" in out
    assert "tokens match HF transformers: yes" in out


def test_demo_with_pipeline_stages_matches_the_cpu_reference(capsys):
    assert load_cli().main(["--tp", "2", "--pp", "2", "--batch-size", "3", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "x 4 rank(s) (threads, tp 2 x pp 2, eager)" in out
    assert "tokens match the cpu reference: yes (greedy, float32: cpu tp=2 pp=2 vs cpu tp=1)" in out


def test_quantized_demo_says_each_ranks_weight_format_and_bytes(capsys):
    assert load_cli().main(["--tp", "2", "--quantization", "int8", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    for rank in (0, 1):
        line = next(line for line in out.splitlines() if line.startswith(f"rank {rank} weights: "))
        assert "float32 " in line and "int8 " in line and line.endswith(" MB"), line
    assert "reference checks: skipped (weights quantized to int8" in out


def test_moore_on_a_machine_without_it_is_one_line_naming_libmusart():
    result = run_script("--device", "moore")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "libmusart" in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--tp", "3"], "does not divide the model's 4 attention heads"),
    (["--pp", "5"], "pp=5 needs at least 5 layers"),
    (["--device", "warp"], "unknown backend 'warp'"),
    (["--model", "/no/such/model"], "model path does not exist"),
    (["--top-p", "0"], "top_p must be in (0, 1]"),
    (["--temperature", "-1"], "temperature must be"),
    (["--max-new-tokens", "0"], "max_new_tokens must be"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--dtype", "int3"], "dtype 'int3' is not supported"),
    (["--max-cache-len", "8", "--block-size", "4"], "leaving no room to generate"),
    (["--num-blocks", "100000000"], "blocks of 16 tokens fit"),
    (["--tp", "two"], "invalid int value"),
])
def test_bad_input_is_one_error_line_and_exit_code_2(args, message, capsys):
    try:
        code = load_cli().main(args)
    except SystemExit as exc:   # argparse's own errors
        code = exc.code
    assert code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0]


def test_an_hf_model_directory_runs(tmp_path, capsys):
    directory = write_hf_checkpoint(tmp_path / "llama")
    assert load_cli().main(["--model", str(directory), "--max-new-tokens", "5", "--prompt", "Hello world"]) == 0
    out = capsys.readouterr().out
    assert "--- output 0" in out and "tokens match" not in out   # only the demo is checked



def test_a_hub_id_is_one_line_saying_only_local_paths_are_read_and_how_to_download(tmp_path):
    result = run_script("--model", "meta-llama/Llama-3.2-1B", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "reads only local files" in lines[0]
    assert "huggingface-cli download meta-llama/Llama-3.2-1B --local-dir DIR" in lines[0]
