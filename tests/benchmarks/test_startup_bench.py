"""benchmarks/startup_bench.py runs end to end on cpu (a tiny random model): test_infer and anydev serve,
Triton's cache cold and warm, every start-up phase there with a time >= 0, the phases within the wall
time, serve's engine core split into its own phases (a record: no timing thresholds)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from anydev.core.process_timeline import PROCESS_PHASES

ROOT = Path(__file__).resolve().parents[2]
SERVE_PHASES = ("engine core up", "front end up (/health 200)", "first streamed token")


def test_startup_bench_times_every_phase_of_both_commands_cold_and_warm(tmp_path):
    model, out = tmp_path / "tiny", tmp_path / "startup.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_random_model.py"), str(model), "--layers", "2",
                    "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--vocab", "384", "--dtype", "float32"],
                   check=True, capture_output=True, timeout=120)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "startup_bench.py"), "--device", "cpu",
                           "--model", str(model), "--engine-args", "--max-model-len 64", "--timeout", "240",
                           "--out", str(out)], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["prompt_tokens"] >= 16 and report["command"]
    runs = {(r["case"], r["cache"]): r for r in report["runs"]}
    assert set(runs) == {(case, cache) for case in ("test_infer", "serve") for cache in ("cold", "warm")}
    for (case, _), row in runs.items():
        assert row["rc"] == 0 and "error" not in row, row
        assert tuple(row["phases"]) == (PROCESS_PHASES if case == "test_infer" else SERVE_PHASES)
        assert all(seconds >= 0 for seconds in row["phases"].values()), row
        assert sum(row["phases"].values()) <= row["wall"], row
        assert 0 < row["to_first_token"] <= row["wall"]
        if case == "serve":   # the engine core's own phases, its spawn to its ready, within "engine core up"
            core = row["core_phases"]
            assert list(core) == [p for p in PROCESS_PHASES if p in core] and core["imports"] > 0, core
            assert sum(core.values()) <= row["phases"]["engine core up"] + 0.005 * len(core), row
    for cache in ("cold", "warm"):   # the phases that always take time on any device
        phases = runs[("test_infer", cache)]["phases"]
        assert phases["imports"] > 0 and phases["weights"] > 0 and phases["first prefill"] > 0
