"""The benchmarks of the model families on the cpu, tiny: decode_bench at the Qwen3-8B and
Qwen3-30B-A3B shapes (their tiny versions) gives a row per case with its weight reads; the reads
follow the expected-experts rule; moe_bench compares the Triton MoE kernels (under the interpreter)
with their references. No timing is asserted."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    if str(BENCHMARKS) not in sys.path:   # as when run as a script: it imports the scripts beside it
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("shape", ["qwen3-8b", "qwen3-30b-a3b"])
def test_decode_bench_runs_the_qwen3_shapes(tmp_path, shape):
    out = tmp_path / "decode.json"
    code = load("decode_bench").main(["--tiny", "--shape", shape, "--batch-sizes", "1,4", "--contexts", "8",
                                      "--new-tokens", "3", "--prefill-len", "0", "--hf", "none", "--modes", "eager",
                                      "--no-kernel-count", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["architecture"] == {"qwen3-8b": "qwen3", "qwen3-30b-a3b": "qwen3_moe"}[shape]
    rows = {r["batch"]: r for r in report["rows"]}
    assert sorted(rows) == [1, 4] and all(r["decode_tokens_per_s"] > 0 and r["weights_gbps"] > 0 for r in rows.values())
    if shape == "qwen3-30b-a3b":
        assert rows[1]["active_experts"] == 2 and 2 < rows[4]["active_experts"] < 8


def test_weight_reads_count_the_expected_experts():
    from anydev.core.loading.random_weights import QWEN3_30B_A3B, model_config
    reads = load("decode_bench").weight_reads(model_config("qwen3_moe", **dict(QWEN3_30B_A3B, num_hidden_layers=8)),
                                              batch=1, itemsize=2, step_ms=1.0)
    expert_bytes = 8 * 8 * 3 * 768 * 2048 * 2          # 8 layers x 8 experts x gate, up, down
    assert reads["active_experts"] == 8 and math.isclose(reads["experts_gb_per_step"], expert_bytes / 1e9)
    assert math.isclose(reads["experts_gbps"], expert_bytes / 1e9 / 1e-3)


def test_moe_bench_compares_the_triton_kernels_with_the_references(tmp_path):
    """In a process of its own: Triton's interpreter is chosen when triton is first imported."""
    out = tmp_path / "moe.json"
    env = dict(os.environ, TRITON_INTERPRET="1", ANYDEV_CPU_TRITON="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "moe_bench.py"), "--device", "cpu", "--tiny", "--dtype",
                           "float32", "--batch-sizes", "1", "--iters", "1", "--reps", "1", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["kernel"] for r in rows] == ["moe_route", "moe_linear", "moe_linear"]
    assert all(r["max_abs_diff"] < 1e-4 and r["native_us"] > 0 for r in rows)
