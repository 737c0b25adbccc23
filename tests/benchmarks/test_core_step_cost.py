"""benchmarks/core_step_cost.py on cpu (a tiny random model): both runs get their row, and the served
loop's step is broken down into engine.step and the core's own methods, each a share of the time
between steps, for the decode steps and for the prompts' steps, which the engine's counters count (a
record: no timing thresholds)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_core_step_cost_breaks_each_runs_step_into_its_phases(tmp_path):
    model = tmp_path / "tiny"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_random_model.py"), str(model), "--layers", "1",
                    "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--vocab", "384", "--dtype", "float32"],
                   check=True, capture_output=True, timeout=120)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "core_step_cost.py"), "--model", str(model),
                           "--streams", "4", "--output-len", "12", "--prompt-len", "8", "--deadline", "120"],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    phases = {}
    for run in ("offline", "served"):
        found = [line for line in done.stdout.splitlines() if line.startswith(f"{run} ") and "engine.step" in line
                 and " prefill " not in line]
        assert len(found) == 1, done.stdout
        assert re.search(rf"^{run} +\d+ +\d+ +\d+$", done.stdout, re.M), done.stdout     # its row: wall, CPU, steps
        pairs = re.findall(r"([\w.]+) (-?[\d.]+)", found[0].split(maxsplit=1)[1])     # "name µs, name µs, ..."
        phases[run] = {name: float(us) for name, us in pairs}
    assert set(phases["offline"]) == {"engine.step", "other"}
    assert {"engine.step", "_collect", "_flush", "other"} <= set(phases["served"])
    for run, means in phases.items():
        assert all(us >= -1 for us in means.values()), (run, means)    # each within the time between steps
        assert means["engine.step"] > 0, (run, means)
    for run in ("offline", "served"):      # 4 prompts of 8 tokens: at least one step with prompt tokens
        steps, seconds, phases = re.search(rf"^{run} +prefill (\d+) steps ([\d.]+) s: (.*)$", done.stdout, re.M).groups()
        assert int(steps) >= 1 and float(seconds) > 0, done.stdout
        if run == "offline":   # all four at once fit one step: its count is its run's alone, not the served run's too
            assert int(steps) == 1, done.stdout
        assert "engine.step" in phases, done.stdout
        assert re.search(rf"^{run} +gc: gen0 \d+ \([\d.]+ ms\), gen1 \d+ \([\d.]+ ms\), gen2 \d+ \([\d.]+ ms\)$",
                         done.stdout, re.M), done.stdout
    assert re.search(r"^prefill seconds, served / offline: [\d.]+x$", done.stdout, re.M), done.stdout
