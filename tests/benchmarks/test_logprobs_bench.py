"""benchmarks/logprobs_bench.py (the GPU target's script, results/.../session9/parts/api.sh) runs in a
tiny configuration and reports both modes with every round (no timing is asserted)."""
from __future__ import annotations

import json

from test_benchmarks_smoke import load


def test_logprobs_bench_reports_plain_and_logprobs_rounds(tmp_path):
    out = tmp_path / "logprobs.json"
    assert load("logprobs_bench").main(["--tiny", "--batch", "2", "--prompt-len", "8", "--new-tokens", "4",
                                        "--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["rounds"]) == ["plain", "logprobs=5"]
    assert all(len(rounds) == 2 and min(rounds) > 0 for rounds in report["rounds"].values())
