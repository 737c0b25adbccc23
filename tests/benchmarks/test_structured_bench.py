"""benchmarks/structured_bench.py (the GPU target's script, parts/h33s.sh) runs in a tiny configuration,
reports both modes with every round, finds every constrained answer accepted by its schema, and times
the host's mask work with every fed token accepted (no timing is asserted)."""
from __future__ import annotations

import json

import pytest

from test_benchmarks_smoke import load

pytest.importorskip("llguidance", reason="structured output needs llguidance (pip install anydev[structured])")


def test_structured_bench_reports_plain_and_json_schema_rounds(tmp_path):
    out = tmp_path / "structured.json"
    assert load("structured_bench").main(["--tiny", "--batch", "2", "--prompt-len", "8", "--new-tokens", "6",
                                          "--vocab", "600", "--repeats", "2", "--host-steps", "4", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["rounds"]) == ["plain", "json_schema"] and report["answers_follow_the_schema"] is True
    assert all(len(rounds) == 2 and min(rounds) > 0 for rounds in report["rounds"].values())
    host = report["host_ms_per_step"]
    assert host["steps"] == 4 and host["fill"] > 0 and host["catch_up"] > 0 and host["accepted"] is True
