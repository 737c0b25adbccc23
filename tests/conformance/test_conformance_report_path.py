"""``python -m anydev.conformance --report`` to a place it cannot write fails at once, before any
check runs: one usage-error line (exit 4), not a traceback after the whole run."""
from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("where", ["under a file", "a directory"])
def test_an_unwritable_report_path_fails_before_the_run(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    report = {"under a file": blocker / "report.json", "a directory": tmp_path}[where]
    result = subprocess.run([sys.executable, "-m", "anydev.conformance", "--device", "cpu", "--report", str(report)],
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 4, output
    assert f"ERROR: --report {report}: cannot be written" in output
    assert "Traceback" not in output and "passed" not in output


def test_a_writable_report_path_leaves_no_file_behind_when_checked(tmp_path):
    from anydev.conformance.report import check_writable

    check_writable(tmp_path / "new" / "report.json")
    assert (tmp_path / "new").is_dir() and list((tmp_path / "new").iterdir()) == []
