"""The mutation runner of the conformance suite: a mutant the suite fails is reported caught, with
the check; a mutant that changes nothing survives and fails the run; the registry's rules."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from anydev.backends.cpu.runtime import CpuRuntime
from anydev.conformance import mutants

REQUIRED = {  # the faults the suite must catch (issue 9); each is one mutant
    "memset-noop", "memset-first-page", "memcpy-synchronous", "pinned-is-pageable", "event-query-always-done",
    "elapsed-time-constant", "wait-event-ignored", "streams-one-queue", "current-device-global",
    "all-reduce-local", "all-reduce-wrong-above-1mib", "all-reduce-bf16-wrong", "all-gather-reversed",
    "broadcast-root-0", "collectives-off-stream", "kv-never-zeroed", "torch-view-offset",
    "errors-swallowed", "free-no-wait", "alloc-on-device-0", "graph-replay-stale",
    "recv-never-writes", "send-wrong-peer", "recv-last-message-first", "send-reads-at-call", "send-first-mib-only",
    "comm-abort-frees-no-waiter", "comm-abort-noop",
    "d2h-copy-unordered", "all-gather-wrong-beyond-2-ranks", "kv-memset-first-page", "graph-freezes-conversions",
    "elapsed-time-in-seconds",
    "quantized-linear-int8-scale-of-next-row", "quantized-linear-q4-k-next-block",     # issue 21
    "quantized-linear-q4-0-nibbles-swapped",
    "quantized-linear-q4-k-offer-drops-mins", "rms-norm-bfloat16-offer-without-eps",   # issue 30
    "moe-route-ties-to-the-higher-expert", "moe-route-not-renormalized", "moe-linear-next-expert",   # issue 34
    "memset-unaligned-ragged-tail", "d2d-copy-ignores-src-offset", "malloc-overlaps-after-out-of-order-free",  # issue 36
    "broadcast-from-the-last-rank", "all-reduce-int8-unsigned", "all-reduce-writes-a-whole-vector",
    "comm-init-all-ranks-in-device-order", "event-record-keeps-the-first", "wait-event-ignored-across-devices",
    "torch-stream-clears-queued-errors", "rms-norm-wrong-beyond-4096-columns", "free-host-no-wait",
    "recv-of-0-elements-writes-one", "recv-from-a-non-neighbour-drops-the-last-element", "comm-init-rank-in-arrival-order",
    "logprobs-ties-to-the-higher-id", "logprobs-logsumexp-misses-the-last-chunk",             # contract 1.10
    "logprobs-negative-target-wraps", "logprobs-target-of-the-next-row",
    "moe-combine-weights-of-the-next-copy", "moe-combine-drops-the-last-copy",
    "quantized-linear-q8-0-split-scale-of-next-group",                                       # contract 1.11
    "quantized-linear-q6-k-split-nibble-halves-swapped",                                     # contract 1.12
}

EXTRA = textwrap.dedent('''
    from anydev.backends.cpu.runtime import CpuRuntime
    from anydev.conformance.mutants import mutant
    from anydev.conformance.mutants.memory import MemsetDoesNothing

    @mutant("identity", checks=["test_memory.py::test_memset_pattern_and_sub_range"])
    class Identity(CpuRuntime):
        """Changes nothing: the suite passes on it, so it survives."""

    @mutant("memset-noop-narrow", checks=["test_memory.py::test_memset_pattern_and_sub_range"])
    class NarrowMemsetNoop(MemsetDoesNothing):
        """memset_async does nothing (run on one check only)."""
''')


def test_every_required_fault_has_a_mutant():
    known = mutants.all_mutants()
    assert REQUIRED <= set(known), f"missing mutants: {sorted(REQUIRED - set(known))}"
    assert len(REQUIRED) >= 21
    for m in known.values():
        assert issubclass(m.runtime, CpuRuntime) and m.fault and m.checks, m


def test_a_mutant_needs_a_docstring_and_a_unique_name():
    mutants.all_mutants()   # registered here too (under xdist the other checks may run elsewhere)
    with pytest.raises(ValueError, match="docstring"):
        mutants.mutant("no-doc", checks=["test_memory.py"])(type("NoDoc", (CpuRuntime,), {}))
    with pytest.raises(ValueError, match="two mutants"):
        mutants.mutant("memset-noop", checks=["test_memory.py"])(type("Other", (CpuRuntime,), {"__doc__": "x"}))


def test_runner_reports_caught_with_the_check_and_fails_on_a_survivor(tmp_path):
    (tmp_path / "extra_mutants.py").write_text(EXTRA)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "anydev.conformance.mutants", "--modules", "extra_mutants", "-j", "2",
         "memset-noop-narrow", "identity"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "mutants caught: 1/2" in out, out
    caught = next(line for line in out.splitlines() if line.startswith("CAUGHT"))
    assert "memset-noop-narrow" in caught and "test_memset_pattern_and_sub_range" in caught, out
    assert any(line.startswith("SURVIVED") and "identity" in line for line in out.splitlines()), out
    assert "NOT CAUGHT: identity" in out, out


def test_cpu_device_graphs_pass_the_graph_checks(tmp_path):
    """The base of the graph mutant, the cpu backend with ANYDEV_CPU_GRAPHS=1, passes the group the
    mutant fails: what the mutant breaks is the only difference."""
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "cpu", "--report", str(report_file), "--", "-q", "-k", "test_graphs"],
        env={**os.environ, "ANYDEV_CPU_GRAPHS": "1"}, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    import json

    checks = json.loads(report_file.read_text())["checks"]
    assert len(checks) >= 3 and {c["status"] for c in checks} == {"pass"} and {c["group"] for c in checks} == {"graphs"}


#: Faults that a flaky or skipped check could let through, each with its two independent checks (issue 23).
TWO_CHECKS = {
    "wait-event-ignored": ("test_order_across_streams_through_an_event", "test_a_stream_waiting_on_an_event_finishes_after_it"),
    "elapsed-time-in-seconds": ("test_elapsed_time_matches_the_work", "test_elapsed_time_covers_a_wait_on_another_stream"),
    "free-no-wait": ("test_free_waits_for_queued_work", "test_free_returns_after_the_devices_queued_work"),
}


def test_single_check_faults_are_caught_by_two_independent_checks(tmp_path):
    """Each of these mutants fails both of its checks, so one flaky or skipped check cannot let it through."""
    import json

    report_file = tmp_path / "report.json"
    names = [name for pair in TWO_CHECKS.values() for name in pair]
    done = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--anydev-mutant", ",".join(TWO_CHECKS),
         "--device", ",".join(f"mutant-{m}" for m in TWO_CHECKS), "--report", str(report_file),
         "--", "-q", "-k", " or ".join(names)],
        env={**os.environ, "ANYDEV_CPU_DEVICE_MEMORY": "1GiB"}, capture_output=True, text=True, timeout=600,
    )
    assert report_file.exists(), done.stdout[-3000:] + done.stderr[-2000:]
    status = {(c["backend"], c["check"].split("::")[1].split("[")[0]): c["status"]
              for c in json.loads(report_file.read_text())["checks"]}
    for mutant_name, checks in TWO_CHECKS.items():
        for check in checks:
            assert status.get((f"mutant-{mutant_name}", check)) == "fail", (mutant_name, check, status)


LINGERS = """
import faulthandler, json, sys, time
faulthandler.enable()
report, write = sys.argv[1], sys.argv[2] == "report"

def linger_after_the_checks():
    while True:
        time.sleep(0.05)

if write:
    with open(report, "w") as f:
        json.dump({"checks": [{"check": "conformance/test_x.py::test_y", "status": "fail", "reason": "wrong bytes"}]}, f)
linger_after_the_checks()
"""


@pytest.mark.parametrize("writes_report", [True, False], ids=["hangs-after-its-report", "hangs-before-any-report"])
def test_runner_ends_a_hung_run_and_quotes_its_stacks(tmp_path, monkeypatch, writes_report):
    from anydev.conformance.mutants import __main__ as runner

    script = tmp_path / "lingers.py"
    script.write_text(LINGERS)
    monkeypatch.setattr(runner, "EXIT_GRACE_S", 1)
    monkeypatch.setattr(runner, "RUN_TIMEOUT_S", 4)
    monkeypatch.setattr(runner, "pytest_command", lambda m, report, tp, isolated=False: [
        sys.executable, str(script), str(report), "report" if writes_report else "none"])
    outcome = runner.run_one(mutants.all_mutants()["memset-noop"], tmp_path, tp=1)
    if writes_report:   # the check caught it: the verdict stands, the hang is reported beside it
        assert outcome.verdict == "caught" and "test_x.py::test_y: wrong bytes" in outcome.detail, outcome
        assert "wrote its report, then did not exit within 1 s" in outcome.hang, outcome
        stacks = outcome.hang
    else:
        assert outcome.verdict == "error" and "did not finish within 4 s" in outcome.detail, outcome
        stacks = outcome.detail
    assert "linger_after_the_checks" in stacks, stacks
