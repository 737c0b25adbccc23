"""The conformance report and matrix, and the suite run end to end in subprocesses: on cpu, and on
fake backends (unavailable, broken, wrong contract version, a sloppy runtime that breaks the contract)
registered through a real entry point, to show that skips and failures are reported as such."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anydev.conformance.__main__ import parse_args, pytest_args
from anydev.conformance.report import (
    BACKEND_KEY, CONTRACT_SHAPE, GROUP_KEY, HARDWARE_KEY, CheckResult, ResultCollector, markdown_matrix, matrix_cell,
    verdicts, write_report,
)


def report(nodeid, when, outcome, backend="x", group="memory", hardware="gpu", longrepr=None, duration=0.5):
    return pytest.TestReport(
        nodeid=nodeid, location=("f.py", 0, nodeid), keywords={}, outcome=outcome, longrepr=longrepr, when=when,
        duration=duration, user_properties=[(BACKEND_KEY, backend), (GROUP_KEY, group), (HARDWARE_KEY, hardware)],
    )


def phases(nodeid, *outcomes, **kw):
    """setup/call/teardown reports with the given outcomes (``None``: phase absent)."""
    return [report(nodeid, when, outcome, **kw) for when, outcome in zip(("setup", "call", "teardown"), outcomes) if outcome]


# ---- folding pytest reports into results -------------------------------------------------------

def test_unavailable_backend_is_skipped_with_its_reason_never_passed():
    collector = ResultCollector()
    why = "backend 'nvidia' is unavailable: libcudart.so not found (searched: CUDA_HOME; /usr/local/cuda/lib64)"
    for i in range(3):
        for r in phases(f"t.py::check{i}[nvidia]", "skipped", None, "passed", backend="nvidia", hardware="unavailable",
                        longrepr=("t.py", 1, f"Skipped: {why}")):
            collector.add(r)
    results = collector.results()
    assert [r.status for r in results] == ["skip"] * 3
    assert {r.reason for r in results} == {why}
    assert {r.hardware for r in results} == {"unavailable"}
    matrix = markdown_matrix(results)
    assert "| nvidia | unavailable | not certified | skip: backend 'nvidia' is unavailable" in matrix
    assert "Not certified:\n- nvidia: no behaviour check ran: backend 'nvidia' is unavailable" in matrix
    assert verdicts(results) == {"nvidia": ("not certified", f"no behaviour check ran: {why}")}


def test_phases_fold_into_one_result_per_check():
    collector = ResultCollector()
    for r in phases("t.py::ok[x]", "passed", "passed", "passed", duration=0.25):
        collector.add(r)
    for r in phases("t.py::bad[x]", "passed", "failed", "passed", longrepr="E  AssertionError: 3 != 4\nmore"):
        collector.add(r)
    for r in phases("t.py::setup_error[x]", "failed", None, "passed", longrepr="E  PluginError: broken"):
        collector.add(r)
    for r in phases("t.py::teardown_error[x]", "passed", "passed", "failed", longrepr="E  leak"):
        collector.add(r)
    collector.add(report("t.py::interrupted[x]", "setup", "passed"))
    by_check = {r.check: r for r in collector.results()}
    assert by_check["t.py::interrupted[x]"].status == "fail", "a check that never ran its call did not pass"
    assert by_check["t.py::ok[x]"].status == "pass" and by_check["t.py::ok[x]"].reason == ""
    assert by_check["t.py::ok[x]"].duration == pytest.approx(0.75)
    assert (by_check["t.py::bad[x]"].status, by_check["t.py::bad[x]"].reason) == ("fail", "more")
    assert by_check["t.py::teardown_error[x]"].reason == "[teardown] E  leak"
    assert by_check["t.py::setup_error[x]"].status == "fail"
    assert by_check["t.py::setup_error[x]"].reason.startswith("[setup]")
    assert by_check["t.py::teardown_error[x]"].status == "fail"


def test_reports_of_other_tests_are_ignored():
    collector = ResultCollector()
    plain = pytest.TestReport(nodeid="tests/test_x.py::t", location=("f", 0, "t"), keywords={}, outcome="passed",
                              longrepr=None, when="call")
    collector.add(plain)
    assert collector.results() == []


# ---- the matrix and the JSON file ------------------------------------------------------------

def result(backend, group, status, reason="", hardware="H200", kind="behaviour", ranks=1):
    return CheckResult(backend, f"{group}::{status}{reason}", group, status, reason, 0.1, hardware, kind, ranks)


def test_matrix_cells():
    assert matrix_cell([result("a", "memory", "pass")] * 12) == "12/12 pass"
    assert matrix_cell([result("a", "memory", "fail")] * 3 + [result("a", "memory", "pass")] * 9) == "3 fail, 9/12 pass"
    assert matrix_cell([result("a", "memory", "pass")] * 10 + [result("a", "memory", "skip", "x")] * 2) == "10/12 pass, 2 skip"
    assert matrix_cell([result("a", "memory", "skip", "no torch_musa")] * 4) == "skip: no torch_musa"
    assert matrix_cell([]) == "-"
    long = "x" * 70
    assert matrix_cell([result("a", "memory", "skip", long)]) == "skip: " + "x" * 51 + "..."


def test_a_skip_cell_keeps_the_why_of_a_long_reason_whole():
    """A reason written "why; details" shows its why in the cell, not a cut sentence; the emulated
    runtimes' graphs cell says why they cannot run there."""
    from anydev.conformance.emulated_runtime import GRAPHS_NOT_EMULATED

    reason = "no torch_musa; install it from the vendor's index, then run again with the same flags"
    assert matrix_cell([result("a", "graphs", "skip", reason)]) == "skip: no torch_musa"
    assert matrix_cell([result("moore", "graphs", "skip", GRAPHS_NOT_EMULATED)]) == \
        "skip: graphs not emulated: need the vendor torch's capture"


def test_markdown_matrix_rows_and_columns():
    results = (
        [result("cpu", "contract", "pass", hardware="host CPU")] * 2
        + [result("cpu", "collectives", "fail", "wrong sum", hardware="host CPU")]
        + [result("moore", "contract", "pass", hardware="emulated runtime")]
        + [result("moore", "inference", "skip", "needs torch_musa", hardware="emulated runtime")]
    )
    lines = markdown_matrix(results).splitlines()
    assert lines[0] == "| backend | where it ran | verdict | contract | collectives | inference | contract shape |"
    assert lines[2] == "| cpu | host CPU | failed | 2/2 pass | 1 fail, 0/1 pass | - | - |"
    assert lines[3] == "| moore | emulated runtime | certified at 1 rank | 1/1 pass | - | skip: needs torch_musa | - |"


def test_the_matrix_and_the_verdict_say_at_how_many_ranks():
    """Each group's cell lists the rank counts its checks ran at; the verdict names the most ranks
    at which a behaviour check passed (skipped checks ran at none)."""
    results = [result("cpu", "contract", "pass", ranks=1)] + [
        result("cpu", "collectives", "pass", ranks=n) for n in (1, 2, 3, 8)
    ] + [result("cpu", "inference", "skip", "heads do not split", ranks=16)]
    lines = markdown_matrix(results).splitlines()
    assert lines[2] == "| cpu | H200 | certified at 8 ranks | 1/1 pass | 4/4 pass at 1,2,3,8 ranks | skip: heads do not split | - |"
    failing = results + [result("cpu", "collectives", "fail", "wrong order", ranks=3)]
    assert markdown_matrix(failing).splitlines()[2].split(" | ")[2] == "failed"


def test_contract_shape_checks_are_counted_apart_and_certify_nothing():
    shape = [result("x", "contract", "pass", kind=CONTRACT_SHAPE)] * 3
    skipped = [result("x", "memory", "skip", "0 devices")] * 2
    lines = markdown_matrix(shape + skipped).splitlines()
    assert lines[0] == "| backend | where it ran | verdict | memory | contract shape |"
    assert lines[2] == "| x | H200 | not certified | skip: 0 devices | 3/3 pass |"
    assert verdicts(shape + skipped)["x"] == ("not certified", "no behaviour check ran: 0 devices")
    assert verdicts(shape + skipped + [result("x", "memory", "pass")])["x"][0] == "certified"
    assert verdicts(shape + [result("x", "memory", "pass"), result("x", "memory", "fail")])["x"][0] == "failed"


def test_json_report_fields(tmp_path):
    results = [result("cpu", "memory", "pass", hardware="host CPU"), result("nvidia", "memory", "skip", "no libcudart", "unavailable")]
    json_path, md_path = write_report(tmp_path / "out" / "report.json", results, {"command": "python -m anydev.conformance"})
    document = json.loads(json_path.read_text())
    assert document["command"] == "python -m anydev.conformance"
    assert document["hardware"] == {"cpu": "host CPU", "nvidia": "unavailable"}
    assert document["summary"] == {"cpu": {"memory": {"pass": 1}}, "nvidia": {"memory": {"skip": 1}}}
    assert document["verdicts"] == {
        "cpu": {"verdict": "certified", "reason": "1 behaviour checks passed", "text": "certified at 1 rank", "ranks": 1},
        "nvidia": {"verdict": "not certified", "reason": "no behaviour check ran: no libcudart", "text": "not certified",
                   "ranks": None}}
    assert document["ranks"] == {"cpu": {"memory": [1]}}
    for check in document["checks"]:
        assert set(check) == {"backend", "check", "group", "status", "reason", "duration", "hardware", "kind", "ranks"}
    assert md_path == tmp_path / "out" / "report.md"
    assert "| nvidia | unavailable | not certified | skip: no libcudart | - |" in md_path.read_text()


def test_main_forwards_options_to_pytest():
    args, extra = parse_args(["--device", "cpu", "--tp", "2", "--report", "r.json", "-n", "2", "--emulated", "moore", "--", "-k", "memory"])
    argv = pytest_args(args, extra)
    for expected in (["--device", "cpu"], ["--tp", "2"], ["--report", "r.json"], ["-n", "2"], ["--anydev-emulated", "moore"], ["-k", "memory"]):
        i = argv.index(expected[0])
        assert argv[i:i + len(expected)] == expected
    assert argv[0].endswith("conformance")
    by_default = pytest_args(*parse_args(["--device", "cpu"]))  # crash isolation: one xdist worker
    assert by_default[by_default.index("-n"):by_default.index("-n") + 2] == ["-n", "1"]


# ---- the suite end to end, in subprocesses -------------------------------------------------------

FAKE_PLUGINS = '''
"""Fake backends for the conformance report tests."""
from anydev.plugin_api import CONTRACT_VERSION, BackendPlugin, BackendUnavailableError, hookimpl


def _ghost():
    raise BackendUnavailableError("ghost", "libghost.so not found", ["GHOST_HOME", "/opt/ghost/lib"])


def _sloppy():
    from anydev.backends.cpu.runtime import CpuRuntime

    class SloppyRuntime(CpuRuntime):
        """Breaks the contract twice: event_query blocks until the event is done (instead of
        reporting work still running), and all_reduce ignores op."""

        name = "sloppy"
        hardware_label = "host CPU (sloppy)"

        def event_query(self, event):
            self.event_synchronize(event)
            return True

        def all_reduce(self, send, recv, count, dtype, op, comm, stream):
            super().all_reduce(send, recv, count, dtype, "sum", comm, stream)

    return SloppyRuntime()


class Ghost:
    @hookimpl
    def anydev_backends(self):
        return [BackendPlugin(name="ghost", contract_version=CONTRACT_VERSION, load=_ghost)]


class Sloppy:
    @hookimpl
    def anydev_backends(self):
        return [BackendPlugin(name="sloppy", contract_version=CONTRACT_VERSION, load=_sloppy)]


class FromTheFuture:
    @hookimpl
    def anydev_backends(self):
        return [BackendPlugin(name="future", contract_version=(CONTRACT_VERSION[0] + 1, 0), load=_ghost)]


ghost, sloppy, future = Ghost(), Sloppy(), FromTheFuture()
'''
ENTRY_POINTS = """[anydev.backends]
ghost = fake_anydev_plugins:ghost
sloppy = fake_anydev_plugins:sloppy
future = fake_anydev_plugins:future
broken = fake_anydev_broken
"""


@pytest.fixture(scope="module")
def fake_plugins_path(tmp_path_factory) -> Path:
    """A folder that, on PYTHONPATH, makes the fake backends discoverable through entry points."""
    root = tmp_path_factory.mktemp("fake-plugins")
    (root / "fake_anydev_plugins.py").write_text(textwrap.dedent(FAKE_PLUGINS))
    (root / "fake_anydev_broken.py").write_text("raise ImportError('libbroken.so: cannot open shared object file')\n")
    dist_info = root / "fake_anydev_plugins-0.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-anydev-plugins\nVersion: 0.0\n")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def run_suite(tmp_path, *args, extra_path: Path | None = None, pytest_extra=()):
    report_file = tmp_path / "report.json"
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "anydev.conformance", *args, "--report", str(report_file), "--", "-q", *pytest_extra]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    document = json.loads(report_file.read_text()) if report_file.exists() else None
    return done, document


def test_suite_on_cpu_passes_and_reports(tmp_path):
    done, document = run_suite(tmp_path, "--device", "cpu", pytest_extra=["-k", "test_contract or test_memory"])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    checks = document["checks"]
    assert {c["group"] for c in checks} == {"contract", "memory"}
    assert {c["backend"] for c in checks} == {"cpu"}
    assert [c for c in checks if c["status"] != "pass"] == []
    assert document["hardware"]["cpu"] == "host CPU (virtual devices)"
    assert "anydev conformance matrix" in done.stdout
    contract, memory = (document["summary"]["cpu"][group]["pass"] for group in ("contract", "memory"))
    shape = document["contract_shape"]["cpu"]["pass"]
    assert shape >= 5 and {c["kind"] for c in checks} == {"behaviour", "contract shape"}
    assert (f"| cpu | host CPU (virtual devices) | certified at 1 rank | {contract}/{contract} pass | {memory}/{memory} pass | "
            f"{shape}/{shape} pass |") in done.stdout


def test_every_backend_under_xdist_unavailable_skip_broken_fail(tmp_path, fake_plugins_path):
    """``--device all`` with two xdist workers: the controller gets every result with its label."""
    done, document = run_suite(tmp_path, "--device", "all", "-n", "2", extra_path=fake_plugins_path,
                               pytest_extra=["-k", "test_contract"])
    assert done.returncode == 1, "broken plugins must fail the run: " + done.stdout[-3000:]
    by_backend: dict[str, list[dict]] = {}
    for check in document["checks"]:
        by_backend.setdefault(check["backend"], []).append(check)
    assert {"cpu", "nvidia", "moore", "metax", "ghost", "broken", "future", "sloppy"} <= set(by_backend)
    assert {c["status"] for c in by_backend["cpu"]} == {"pass"}
    assert {c["hardware"] for c in by_backend["cpu"]} == {"host CPU (virtual devices)"}
    assert {c["status"] for c in by_backend["ghost"]} == {"skip"}
    assert all("libghost.so not found" in c["reason"] and "GHOST_HOME" in c["reason"] for c in by_backend["ghost"])
    assert {c["status"] for c in by_backend["broken"]} == {"fail"}
    assert all("libbroken.so: cannot open shared object file" in c["reason"] for c in by_backend["broken"])
    assert {c["status"] for c in by_backend["future"]} == {"fail"}
    assert all("major versions must match" in c["reason"] for c in by_backend["future"])
    assert "| ghost | unavailable | not certified | skip: backend 'ghost' is unavailable" in done.stdout
    assert "| broken | broken plugin | failed | " in done.stdout
    assert "NOT CERTIFIED" not in done.stdout, "with --device all, an unavailable backend does not fail the run"
    assert document["verdicts"]["ghost"]["verdict"] == "not certified"


def test_contract_breaches_are_reported_as_failures(tmp_path, fake_plugins_path):
    done, document = run_suite(
        tmp_path, "--device", "sloppy", "--tp", "2", extra_path=fake_plugins_path,
        pytest_extra=["-k", "test_query_reports_running_then_done or test_all_reduce"],
    )
    assert done.returncode == 1
    status = {c["check"].split("::")[-1]: (c["status"], c["reason"]) for c in document["checks"]}
    query = status["test_query_reports_running_then_done[sloppy]"]
    assert query[0] == "fail" and "query() waited for them" in query[1]
    assert status["test_all_reduce[sloppy-2ranks-sum-float32]"][0] == "pass"
    max_2 = status["test_all_reduce[sloppy-2ranks-max-float32]"]
    assert max_2[0] == "fail" and "all_reduce max float32" in max_2[1]
    assert status["test_all_reduce[sloppy-1ranks-max-float32]"][0] == "pass"  # one rank: max == sum
    # one line per failure under the matrix, no traceback: a new backend's first run is a page
    assert "FAIL conformance/test_streams_events.py::test_query_reports_running_then_done[sloppy]: " in done.stdout
    assert "Traceback" not in done.stdout and "_____ test_" not in done.stdout
    assert "short test summary info" not in done.stdout
    assert "add -- --tb=short to see them" in done.stdout


def test_a_backend_named_that_certifies_nothing_fails_the_run(tmp_path, fake_plugins_path):
    """Every check of 'ghost' skips (unavailable): asked for by name, the run fails and says so."""
    done, document = run_suite(tmp_path, "--device", "ghost", extra_path=fake_plugins_path, pytest_extra=["-k", "test_contract or test_memory"])
    assert done.returncode == 1, done.stdout[-3000:]
    assert "NOT CERTIFIED (fails the run: it was asked for by name): backend 'ghost' is not certified" in done.stdout
    assert {c["status"] for c in document["checks"]} == {"skip"}
    assert document["verdicts"]["ghost"]["verdict"] == "not certified"
    assert "| ghost | unavailable | not certified |" in (tmp_path / "report.md").read_text()


HANGING = textwrap.dedent('''
    import threading

    from anydev.backends.cpu.runtime import CpuRuntime
    from anydev.conformance.mutants import mutant

    NEVER = threading.Event()

    @mutant("hangs", checks=["test_collectives.py"])
    class Hangs(CpuRuntime):
        """all_reduce never finishes, and comm_destroy then hangs too."""

        def all_reduce(self, send, recv, count, dtype, op, comm, stream):
            self._enqueue(stream, self._stream("all_reduce", stream), "all_reduce", NEVER.wait)

        def comm_destroy(self, comm):
            NEVER.wait()
''')


def test_a_hung_collective_and_its_hung_teardown_fail_and_the_report_is_written(tmp_path):
    (tmp_path / "hanging_mutant.py").write_text(HANGING)
    env = {**os.environ, "ANYDEV_MUTANT_MODULES": "hanging_mutant", "ANYDEV_CONFORMANCE_HANG_TIMEOUT": "3",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "mutant-hangs", "--tp", "2", "--report", str(report_file),
         "--", "-q", "--anydev-mutant", "hangs", "-k", "test_all_reduce and sum-float32"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    document = json.loads(report_file.read_text())
    checks = {c["check"].split("::")[-1]: c for c in document["checks"]}
    hung = checks["test_all_reduce[mutant-hangs-2ranks-sum-float32]"]
    assert hung["status"] == "fail" and "did not finish within 3 s" in hung["reason"], hung
    # The session's communicators are destroyed after the last check: that hangs too, and is reported.
    assert "; then [teardown] Failed: destroying 1 communicator(s): rank(s) [0] did not finish within 3 s" in hung["reason"], hung


def test_unknown_device_is_a_usage_error(tmp_path):
    done, document = run_suite(tmp_path, "--device", "nosuch")
    assert done.returncode == 4  # pytest's usage-error exit code
    output = done.stdout + done.stderr
    assert "unknown backend(s) nosuch; known: " in output and "cpu" in output
    assert document is None


def test_plugin_stays_quiet_outside_the_suite(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    report_file = tmp_path / "should-not-exist.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_plain.py"), "--report", str(report_file)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "anydev conformance" not in done.stdout
    assert not report_file.exists()
