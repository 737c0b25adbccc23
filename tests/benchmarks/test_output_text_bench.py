"""benchmarks/output_text_bench.py runs in a tiny configuration and reports both methods at both ends
of the answer (no timing is asserted: the ratios are for results/)."""
from __future__ import annotations

import json

from test_benchmarks_smoke import load


def test_output_text_bench_reports_both_methods_at_both_ends(tmp_path):
    out = tmp_path / "output_text.json"
    assert load("output_text_bench").main(["--tokens", "64", "--window", "16", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [row["method"] for row in report["rows"]] == ["OutputText (incremental)", "whole re-decode"]
    for row in report["rows"]:
        assert row["tokens"] == 64 and row["us_per_token_start"] > 0 and row["us_per_token_end"] > 0
