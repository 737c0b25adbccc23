"""benchmarks/serve_bench.py runs end to end on cpu (tiny sizes): every case's requests are answered in
full, the ablation rows and ratios are there, the prefix cache hits only where it is on, the streams
spread over the client processes asked for (each one's load measured), the offline run is timed
per token like the server, both saturate rows count the engine's steps of that case alone, and every
served case records its server's CPU (the engine core's and its front end's)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_bench.py"


def test_serve_bench_runs_every_case_and_its_ablations(tmp_path):
    out = tmp_path / "serve_bench.json"
    command = [sys.executable, str(BENCH), "--tiny", "--requests", "6", "--conversations", "2", "--turns", "2",
               "--batch", "3", "--rate", "20", "--long-every", "3", "--system-len", "64", "--case-deadline", "120",
               "--client-processes", "2", "--out", str(out)]
    if hasattr(os, "sched_getaffinity"):     # pinned where they are: the option's path, through to the report
        command += ["--client-cpus", ",".join(map(str, sorted(os.sched_getaffinity(0))))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    cases = {(r["workload"], r["config"]): r for r in report["rows"]}
    assert set(cases) == {("random", "prefix on, chunked on"), ("shared", "prefix on, chunked on"),
                          ("mixed", "prefix on, chunked on"), ("saturate", "prefix on, chunked on"),
                          ("shared", "prefix OFF, chunked on"), ("mixed", "prefix on, chunked OFF"),
                          ("saturate", "offline generate_ids")}
    for row in report["rows"]:
        assert row["ok"] == row["requests"], row
    assert cases[("shared", "prefix on, chunked on")]["prefix_hit_rate"] > 0.3
    assert cases[("shared", "prefix OFF, chunked on")]["prefix_hit_rate"] == 0
    assert len(report["ratios"]) == 9 and report["command"] and report["date"] and report["device"] == "cpu"
    if hasattr(os, "sched_getaffinity"):
        assert report["settings"]["client_cpus"] == sorted(os.sched_getaffinity(0))
    assert report["ratios"]["saturation ITL p50, server / offline decode step (target <= 1.3)"] > 0
    # the streams of every case but the conversations went through two client processes, each measured
    for (workload, config), row in cases.items():
        if config != "offline generate_ids":
            assert row["client_processes"] == (1 if workload == "shared" else 2), row
            assert 0 < row["client_cpu"] and row["client_lag_p99_ms"] >= 0, row
            assert row["core_cpu"] > 0 and row["front_end_cpu"] > 0, row     # the server's processes, measured
    # the offline run is timed per token, as the server is
    offline = cases[("saturate", "offline generate_ids")]
    assert 0 < offline["ttft_p50_ms"] and 0 <= offline["itl_p50_ms"] and offline["decode_step_ms"] > 0, offline
    assert report["ratios"]["saturation TTFT p50, server / offline, both per token"] > 0
    # the steps of the case alone (the server's counters before and after it): every prompt token and
    # every output token but each request's last is fed to the model once, in a prefill or a decode step
    settings = report["settings"]
    fed = settings["batch"] * (settings["prompt_len"] + settings["output_len"] - 1)
    for config in ("prefix on, chunked on", "offline generate_ids"):
        row = cases[("saturate", config)]
        assert row["prefix_hit_rate"] == 0 and row["prefill_steps"] >= 1 and row["decode_steps"] >= 1, row
        assert row["prefill_tokens"] + row["decode_tokens"] == fed, row
        assert row["decode_step_mean_ms"] > 0 and row["prefill_seconds"] > 0, row
