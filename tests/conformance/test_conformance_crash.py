"""Crash isolation of the conformance suite: a backend that segfaults costs only the check group it
crashed in; the report and the matrix are written, the group shows as crashed with the signal and
the last check started, and the verdict is failed. Also what faulthandler's logs are read as."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from anydev.conformance.crashes import NO_RECORD, backend_of, group_of, parse_log

MUTANT = "d2h-copy-unordered"


def test_a_segfaulting_backend_loses_only_its_group_and_the_report_is_written(tmp_path):
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--anydev-mutant", MUTANT, "--device", f"mutant-{MUTANT}",
         "--report", str(report_file), "--", "-q", "-k", "test_memory or test_contract"],
        env={**os.environ, "ANYDEV_CPU_DEVICE_MEMORY": "1GiB"}, capture_output=True, text=True, timeout=600,
    )
    out = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 1, out
    document = json.loads(report_file.read_text())
    backend = f"mutant-{MUTANT}"
    [crash] = document["crashes"]
    assert (crash["backend"], crash["group"], crash["signal"]) == (backend, "memory", "SIGSEGV"), crash
    assert crash["where"].startswith("memory.py:") and crash["where"].endswith(" in _copy_from_released_stage"), crash
    assert crash["check"].startswith("conformance/test_memory.py::"), crash
    assert document["verdicts"][backend]["verdict"] == "failed"
    assert "crashed: memory" in document["verdicts"][backend]["reason"]
    checks = document["checks"]
    crashed = [c for c in checks if c["status"] == "crashed"]
    assert [c["check"] for c in crashed] == [crash["check"]]
    later = [c for c in checks if c["group"] == "memory" and c["status"] == "skip"]
    assert later and all("crashed this group's process (SIGSEGV" in c["reason"] for c in later), later[:3]
    contract = [c for c in checks if c["group"] == "contract"]
    assert contract and all(c["status"] == "pass" for c in contract), "the other group did not run to the end"
    matrix = report_file.with_suffix(".md").read_text()
    assert "crashed" in matrix and "SIGSEGV" in matrix and crash["check"] in matrix, matrix


def faulthandler_log(tmp_path, code: str) -> str:
    """What faulthandler writes into a log file when a child Python process runs ``code``."""
    log = tmp_path / "worker.log"
    script = f"import faulthandler, time\nlog = open({str(log)!r}, 'w')\nfaulthandler.enable(file=log, all_threads=True)\n{code}\n"
    subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    return log.read_text()


def test_faulthandler_logs_name_the_signal_and_the_frame(tmp_path):
    segv = faulthandler_log(tmp_path, "def crash():\n    import ctypes; ctypes.string_at(0)\ncrash()")
    signal, frame = parse_log(segv)   # the innermost frame: ctypes' string_at, called by crash()
    assert signal == "SIGSEGV" and frame.startswith("__init__.py:") and frame.endswith(" in string_at"), segv
    abort = faulthandler_log(tmp_path, "import os; os.abort()")
    assert parse_log(abort)[0] == "SIGABRT", abort
    hang = faulthandler_log(tmp_path, "faulthandler.dump_traceback_later(0.2, exit=True, file=log)\ntime.sleep(30)")
    signal, frame = parse_log(hang)
    assert signal.startswith("hang") and "0:00:00" in signal and frame == "<string>:5 in <module>", hang
    assert parse_log("") == (NO_RECORD, "")


def test_node_ids_name_their_backend_and_group():
    names = ["cpu", "mutant-memset-noop", "mutant-memset"]
    assert backend_of("conformance/test_memory.py::test_a[cpu]", names) == "cpu"
    assert backend_of("conformance/test_collectives.py::test_b[cpu-2ranks]", names) == "cpu"
    assert backend_of("conformance/test_memory.py::test_c[mutant-memset-noop-large]", names) == "mutant-memset-noop"
    assert backend_of("tests/test_other.py::test_d", names) is None
    assert group_of("conformance/test_streams_events.py::test_e[cpu]") == "streams_events"
