"""``--quick``: the kernels group's interpreter-sized sweep is a flag, not the torch device's doing, and
a certificate earned with it says so in the verdict, the matrix and the JSON report."""
from __future__ import annotations

import json

from anydev.conformance import kernel_domains
from anydev.conformance.__main__ import parse_args, pytest_args
from anydev.conformance.report import QUICK_SWEEP, CheckResult, markdown_matrix, write_report


def passed(backend: str) -> CheckResult:
    return CheckResult(backend=backend, check=f"conformance/test_kernels.py::test_x[{backend}]", group="kernels",
                       status="pass", reason="", duration=0.1, hardware="host CPU")


def test_the_quick_flag_reaches_pytest_and_is_off_by_default():
    assert "--quick" in pytest_args(*parse_args(["--device", "cpu", "--quick"]))
    assert "--quick" not in pytest_args(*parse_args(["--device", "cpu"]))


def test_a_quick_certificate_says_so_in_the_matrix_and_the_report(tmp_path):
    results = [passed("cpu")]
    assert "| certified at 1 rank (quick sweep) |" in markdown_matrix(results, QUICK_SWEEP)
    assert "| certified at 1 rank |" in markdown_matrix(results)
    json_path, md_path = write_report(tmp_path / "r.json", results, {"sweep": QUICK_SWEEP}, sweep=QUICK_SWEEP)
    document = json.loads(json_path.read_text())
    assert document["sweep"] == "quick"
    assert document["verdicts"]["cpu"]["text"] == "certified at 1 rank (quick sweep)"
    assert "(quick sweep)" in md_path.read_text()


def test_the_full_sweep_reaches_the_engines_real_shapes_and_the_quick_one_is_smaller():
    full = quick = kernel_domains
    assert len(full.attention_shapes(False)) == 12 and len(quick.attention_shapes(True)) == 3
    assert full.long_context(False) == 3000 > quick.long_context(True)
    assert max(n for _, n, _ in full.norm_shapes(False)) == 8192 > max(n for _, n, _ in quick.norm_shapes(True))
    assert max(i for _, i in full.silu_shapes(False)) == 14336
    assert (1, 4096, 14336) in full.linear_shapes(False) and max(k for *_, k in quick.linear_shapes(True)) < 1024
