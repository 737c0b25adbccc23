"""The report's performance row: bus bandwidth as nccl-tests define it, cells against the peak, and
measurements that never change a verdict."""
from __future__ import annotations

import json

from anydev.conformance.performance import Measurement, bus_bandwidth, format_cell, performance_table
from anydev.conformance.report import PERFORMANCE, CheckResult, verdicts, write_report


def check(status: str, kind: str, group: str = "memory") -> CheckResult:
    return CheckResult(backend="x", check=f"conformance/test_{group}.py::t[{status}-{kind}]", group=group, status=status,
                       reason="" if status == "pass" else "slow", duration=0.1, hardware="gpu", kind=kind)


def test_bus_bandwidth_is_algbw_times_2_n_minus_1_over_n():
    assert bus_bandwidth(100.0, 1) == 100.0
    assert bus_bandwidth(100.0, 2) == 100.0
    assert bus_bandwidth(100.0, 4) == 150.0
    assert bus_bandwidth(100.0, 8) == 175.0


def test_a_cell_shows_the_fraction_of_peak_only_where_a_peak_is_reported():
    with_peak = Measurement("memset", 1 << 30, 0.001, 3210.0, 4800.0).as_dict()
    assert format_cell(with_peak) == "3.21 TB/s (67% of 4.80 TB/s)"
    assert format_cell(Measurement("linear", 1, 1.0, 0.324, None, note="torch reference").as_dict()) == "0.324 GB/s, torch reference"
    assert format_cell(Measurement("all_reduce", error="RuntimeCallError: boom").as_dict()).startswith("not measured: RuntimeCallError")


def test_performance_checks_change_no_verdict_and_reach_the_report(tmp_path):
    results = [check("pass", "behaviour"), check("fail", PERFORMANCE, "performance")]
    assert verdicts(results)["x"][0] == "certified"
    performance = {"x": {"memset": Measurement("memset", 1, 1.0, 5.0, 10.0).as_dict()}}
    json_path, md_path = write_report(tmp_path / "r.json", results, {}, performance=performance)
    assert json.loads(json_path.read_text())["performance"]["x"]["memset"]["of_peak"] == 0.5
    assert "| x | 5 GB/s (50% of 10 GB/s) | - | - | - |" in md_path.read_text()
    assert "| x | 5 GB/s (50% of 10 GB/s) | - | - | - |" in performance_table(performance)
