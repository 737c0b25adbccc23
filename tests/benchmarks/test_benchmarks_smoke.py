"""The benchmarks run on the cpu in a tiny configuration (what CI can afford; a GPU machine runs them in
full through benchmarks/gpu_record.sh). Checked: every case and engine gets a row, kernels are counted,
the init rows that attribute the gain are there. No timing is asserted."""
from __future__ import annotations

import importlib.util
import json
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


def test_decode_bench_runs_every_case_beside_transformers(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "decode.json"
    code = load("decode_bench").main(["--tiny", "--batch-sizes", "1,2", "--contexts", "16", "--new-tokens", "4",
                                      "--prefill-len", "24", "--hf", "eager",
                                      "--modes", "eager", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    rows = {(r["engine"], r["case"], r["batch"], r["context"]): r for r in report["rows"]}
    for engine in ("anydev eager", "transformers eager"):
        for batch in (1, 2):
            row = rows[(engine, "decode", batch, 16)]
            assert row["decode_tokens_per_s"] > 0 and row["kernels_per_step"] > 0
        assert rows[(engine, "prefill", 1, 24)]["prefill_tokens_per_s"] > 0
    assert "reference write_kv" in report["engines"]["anydev eager"]["kernels"]
    assert len(report["ratios"]) == 3


def test_init_bench_attributes_the_gain_with_the_crossed_rows(tmp_path):
    out = tmp_path / "init.json"
    code = load("init_bench").main(["--layers", "1", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                                    "--vocab", "128", "--kv-gib-per-rank", "0.01", "--tp", "2", "--limit-mib", "4",
                                    "--modes", "serial,serial+memset,parallel+host-zero,parallel", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert list(report["modes"]) == ["serial", "serial+memset", "parallel+host-zero", "parallel"]
    assert all(m["init_seconds"] > 0 for m in report["modes"].values())
    assert {"serial_over_serial+memset", "serial_over_parallel+host-zero", "serial_over_parallel"} <= set(report["ratios"])


def test_step_profile_attributes_a_decode_step_to_its_ops(capsys):
    assert load("step_profile").main(["--tiny", "--context", "8", "--steps", "2", "--rows", "40"]) == 0
    out = capsys.readouterr().out
    assert "== batch 1, context 8" in out
    assert "aten::mm" in out and "aten::index_select" in out   # the projections and the paged reads, profiled


def test_step_profile_builds_the_shape_asked_and_profiles_logprobs(capsys):
    """--shape picks the family, --layers the depth, and --logprobs makes every request's step rank
    its top tokens (aten::topk appears only then)."""
    args = ["--tiny", "--context", "8", "--steps", "2", "--rows", "400", "--shape", "qwen3-30b-a3b", "--layers", "1"]
    assert load("step_profile").main(args) == 0
    plain = capsys.readouterr().out
    assert "qwen3_moe, layers=1" in plain and "aten::topk" not in plain
    assert load("step_profile").main(args + ["--logprobs", "3"]) == 0
    assert "aten::topk" in capsys.readouterr().out


def test_step_profile_profiles_each_mixed_step_of_a_long_prompt(capsys):
    """--mixed: a 40-token prompt in chunks of 16 tokens (2 of them the batch's decodes) takes 3
    mixed steps, each profiled."""
    assert load("step_profile").main(["--tiny", "--context", "8", "--steps", "2", "--rows", "5", "--batch-sizes", "2",
                                      "--mixed", "40", "--max-num-batched-tokens", "16"]) == 0
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if line.startswith("== batch 2 decoding + a 40-token prompt")]
    assert [t.split(",")[1].split("(")[0].strip() for t in titles] == ["chunk 1", "chunk 2", "chunk 3"], titles
    assert all("mixed step wall" in t for t in titles)


def test_executor_bench_sets_each_executors_step_beside_the_threads(capsys):
    assert load("executor_bench").main(["--tiny", "--context", "8", "--new-tokens", "6", "--repeats", "2",
                                        "--batch-sizes", "1,2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["threads"], ["mp"]) and "/" not in line]
    assert sorted((r[0], int(r[1])) for r in rows) == [("mp", 1), ("mp", 2), ("threads", 1), ("threads", 2)]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)   # step ms, and the launch beyond the forward
    assert "mp / threads, batch 1: step" in out and "mp / threads, batch 2: step" in out


def test_linear_bench_times_every_method_for_every_gemm(tmp_path):
    out = tmp_path / "linear.json"
    assert load("linear_bench").main(["--device", "cpu", "--tiny", "--batches", "1,3", "--reps", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    from anydev.plugin_api.weight_formats import WEIGHT_FORMATS
    methods = {"torch bf16", "anydev bf16", *WEIGHT_FORMATS}
    for batch in (1, 3):
        for gemm in ("qkv", "o", "gate_up", "down", "lm_head", "per token"):
            got = {r["method"] for r in rows if r["batch"] == batch and r["gemm"] == gemm}
            assert got == methods, (batch, gemm, methods ^ got)
    assert all(r["us"] > 0 for r in rows)


def test_decode_bench_runs_each_quantization_beside_the_unquantized_engine(tmp_path):
    out = tmp_path / "decode.json"
    assert load("decode_bench").main(["--tiny", "--batch-sizes", "1", "--contexts", "16", "--new-tokens", "3",
                                      "--prefill-len", "0", "--hf", "none", "--modes", "eager", "--no-kernel-count",
                                      "--quantizations", "none,int8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {r["engine"] for r in report["rows"]} == {"anydev eager", "anydev eager int8"}
    assert any(line.startswith("anydev eager int8 / anydev eager, decode batch 1") for line in report["ratios"])


def test_decode_bench_plans_reach_its_engines_and_are_refused_with_processes(tmp_path, monkeypatch, capsys):
    """--plans merges a sweep's file into the recorded plans the engines of this process read; an
    executor of processes would not see them, so --executors mp with --plans is an error, not a run
    on other plans."""
    from anydev.backends.triton_kernels import linear_plans

    monkeypatch.setattr(linear_plans, "RECORDED", dict(linear_plans.RECORDED))
    table = {("cpu", 1, "int8", 64, 64): (1, 16, 64, 1, 4, None)}
    path = tmp_path / "plans.txt"
    load("linear_bench").write_table(str(path), table)
    base = ["--tiny", "--batch-sizes", "1", "--contexts", "16", "--new-tokens", "3", "--prefill-len", "0",
            "--hf", "none", "--modes", "eager", "--no-kernel-count", "--plans", str(path)]
    assert load("decode_bench").main(base + ["--executors", "mp"]) == 2
    assert "--executors threads" in capsys.readouterr().err
    assert ("cpu", 1, "int8", 64, 64) not in linear_plans.RECORDED
    assert load("decode_bench").main(base) == 0
    assert linear_plans.RECORDED[("cpu", 1, "int8", 64, 64)] == (1, 16, 64, 1, 4, None)


def test_decode_bench_repeats_alternate_the_engines_order_and_report_medians(tmp_path):
    out = tmp_path / "decode.json"
    assert load("decode_bench").main(["--tiny", "--batch-sizes", "1", "--contexts", "16", "--new-tokens", "3",
                                      "--prefill-len", "0", "--hf", "none", "--modes", "eager", "--no-kernel-count",
                                      "--quantizations", "none,int8", "--repeats", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    first, second = ["anydev eager", "anydev eager int8"], ["anydev eager int8", "anydev eager"]
    assert report["order"] == [first, second, first]
    assert sorted(r["engine"] for r in report["rows"]) == first          # one row a case: the rounds' median
    assert all(r["repeats"] == 3 and r["decode_tokens_per_s"] > 0 for r in report["rows"])


def test_serve_client_cost_measures_every_stream_count():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(BENCHMARKS / "serve_client_cost.py"), "--streams", "2,3", "--tokens", "4",
                           "--tick-ms", "5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "   2 streams: client CPU" in done.stdout and "   3 streams: client CPU" in done.stdout, done.stdout


def test_read_bench_reads_the_file_by_every_method_at_each_thread_count(tmp_path):
    data = tmp_path / "weights.bin"
    data.write_bytes(bytes(range(256)) * 40_000)          # 10 MB: parts of several chunks
    out = tmp_path / "read.json"
    assert load("read_bench").main([str(data), "--threads", "1,3", "--chunk-mib", "1", "--repeat", "1",
                                    "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bytes"] == 10_240_000 and [r["threads"] for r in report["rows"]] == [1, 3]
    assert all(set(r["gbps"]) == {"mmap", "mmap+populate", "pread"} and min(r["gbps"].values()) > 0
               for r in report["rows"])


def test_a_sweeps_table_out_file_reads_back_as_the_plans_it_wrote(tmp_path):
    """gguf_peer_bench --plans runs a sweep's plans end to end: the file must give back exactly its entries,
    a plan's seventh field (the weights first) included."""
    bench = load("linear_bench")
    table = {("NVIDIA H200", 1, "q4_k", 4096, 4096): (1, 64, 256, 8, 2, None),
             ("NVIDIA H200", 32, "q4_k", 28672, 4096): (32, 64, 256, 1, 4, 3),
             ("NVIDIA H200", 32, "q4_0", 4096, 4096): (32, 64, 128, 2, 4, 3, True)}      # the weights first
    path = tmp_path / "plans.txt"
    bench.write_table(str(path), table)
    assert bench.read_table(str(path)) == table


def test_the_sweep_takes_the_lm_head_at_batch_1_only_when_named():
    """A batch-1 sweep leaves the lm_head out unless --sweep-gemms names it; above batch 1 it is in."""
    import argparse

    bench = load("linear_bench")
    models = {"8B": bench.MODELS["8B"]}

    def swept(batch, gemms=None):
        args = argparse.Namespace(sweep_formats=["q8_0_split"], sweep_gemms=gemms)
        return [name for _, _, name, _, _ in bench.swept_gemms(args, models, batch)]

    assert swept(1) == ["qkv", "o", "gate_up", "down"]
    assert swept(32) == ["qkv", "o", "gate_up", "down", "lm_head"]
    assert swept(1, ["gate_up", "lm_head"]) == ["gate_up", "lm_head"]


def test_sched_step_cost_times_every_phase_of_each_decode_step():
    """Every phase is timed in each of the decode steps asked for (the prefill step before them is
    left out), and the table prints."""
    bench = load("sched_step_cost")
    times = bench.run(streams=8, steps=5, prompt_len=20, block_size=4, seed=0)
    assert set(times) == set(bench.PHASES)
    assert all(len(t) == 5 and min(t) > 0 for t in times.values()), times
    assert bench.main(["--streams", "4", "--steps", "3", "--repeats", "1"]) == 0
