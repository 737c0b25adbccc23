"""``python -m anydev.conformance.mutants``: run the conformance suite on every mutant.

    python -m anydev.conformance.mutants                 # all of them, two at a time
    python -m anydev.conformance.mutants -j 4 memset-noop broadcast-root-0
    python -m anydev.conformance.mutants --list

Each mutant runs in its own pytest process on its checks (``Mutant.checks``), stopping at the first
failure (``-x``): that check caught it; with the kernels group's quick sweep (``--quick``) unless the
mutant asks for the full one (``full_sweep``). Prints one line per mutant and ``mutants caught: N/N``; exits
non-zero when a mutant survived (its checks all passed) or its run went wrong (no check failed, yet
pytest did not pass: a usage error, a crash, a hang). ``--modules`` adds mutant modules (import names).

A run still going :data:`RUN_TIMEOUT_S` after it started, or :data:`EXIT_GRACE_S` after it wrote its
report, is hung: it gets SIGABRT, and the line quotes the stacks that pytest's faulthandler writes. A
run whose report already shows the failed check stays caught, and ``HUNG AFTER CATCHING`` names the
hang beside it: the verdict is the check's, the hang is a bug of its own to look at.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import MODULES_ENV, Mutant, all_mutants

SUITE_DIR = Path(__file__).resolve().parent.parent
#: Environment of each run: small virtual devices, and collective timeouts short enough that a
#: mutant which makes ranks miss each other fails in seconds, not minutes.
RUN_ENV = {"ANYDEV_CPU_DEVICE_MEMORY": "1GiB", "ANYDEV_CPU_COLLECTIVE_TIMEOUT": "30", "OMP_NUM_THREADS": "1"}
RUN_TIMEOUT_S = 600
#: How long a run may take to exit once its report is written (pytest's own teardown, then the
#: interpreter's): a run past it is hung at exit.
EXIT_GRACE_S = 60


@dataclass
class Outcome:
    mutant: Mutant
    verdict: str  # "caught" | "survived" | "error"
    detail: str  # the catching check and its reason, or what went wrong
    seconds: float
    hang: str = ""  # a run that caught the mutant, then hung at exit: what hung and its stacks


def pytest_command(m: Mutant, report: Path, tp: int, isolated: bool = False) -> list[str]:
    """In this process, stopping at the first failure; ``isolated``: in an xdist worker, where a
    crash costs only its check group and the report says where it happened."""
    return [
        sys.executable, "-m", "pytest", *[str(SUITE_DIR / c) for c in m.checks],
        "-p", "no:cacheprovider", "-q", "--rootdir", str(SUITE_DIR), *(["-n", "1"] if isolated else ["-x"]),
        "--anydev-mutant", m.name, "--device", m.backend_name, "--tp", str(tp), "--report", str(report),
        *([] if m.full_sweep else ["--quick"]),
    ]


def run_one(m: Mutant, workdir: Path, tp: int) -> Outcome:
    """Run the suite on one mutant; ``$ANYDEV_MUTANT_MODULES`` passes on to the run. A run that a
    signal ended (the mutant crashed the process) runs again isolated, to report the crash."""
    report = workdir / f"{m.name}.json"
    env = {**os.environ, **RUN_ENV}
    start = time.monotonic()
    run = _run_pytest(pytest_command(m, report, tp), env, report, workdir / f"{m.name}.log")
    if run.returncode is not None and run.returncode < 0:
        run = _run_pytest(pytest_command(m, report, tp, isolated=True), env, report, workdir / f"{m.name}.log")
    seconds = time.monotonic() - start
    failed = []
    if report.exists():
        failed = [c for c in json.loads(report.read_text())["checks"] if c["status"] in ("fail", "crashed")]
    if failed:
        first = next((c for c in failed if c["status"] == "crashed"), failed[0])
        check = first["check"].removeprefix("conformance/")
        reason = " ".join(first["reason"].split("\n")[0].split())
        return Outcome(m, "caught", f"{check}: {reason[:200]}", seconds, run.hang)
    if run.hang:
        return Outcome(m, "error", run.hang, seconds)
    if run.returncode == 0:
        return Outcome(m, "survived", f"every check passed ({', '.join(m.checks)})", seconds)
    tail = " | ".join(run.output.strip().splitlines()[-3:])
    return Outcome(m, "error", f"pytest exited {run.returncode} without a failed check: {tail[:300]}", seconds)


@dataclass
class _Run:
    returncode: int | None  # None: it hung and was ended
    output: str
    hang: str = ""  # what hung, with the stacks it dumped ("" when it exited by itself)


def _run_pytest(command: list[str], env: dict, report: Path, log: Path) -> _Run:
    """Run one pytest process. One that is still running :data:`EXIT_GRACE_S` after writing its
    report, or :data:`RUN_TIMEOUT_S` after starting, gets SIGABRT: pytest's faulthandler then writes
    every thread's stack, which the hang's description quotes."""
    report.unlink(missing_ok=True)
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        hang = ""
        while proc.poll() is None:
            time.sleep(0.2)
            if time.monotonic() - start > RUN_TIMEOUT_S:
                hang = f"the run did not finish within {RUN_TIMEOUT_S} s"
            elif report.exists() and time.time() - report.stat().st_mtime > EXIT_GRACE_S:
                hang = f"the run wrote its report, then did not exit within {EXIT_GRACE_S} s"
            if hang:
                proc.send_signal(signal.SIGABRT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                break
    output = log.read_text(errors="replace")
    if hang:
        return _Run(None, output, f"{hang}; its stacks: {_stacks(output)}")
    return _Run(proc.returncode, output)


def _stacks(output: str) -> str:
    """The thread stacks faulthandler wrote, one line each (innermost frame first), or a note."""
    dump = output[output.rfind("Fatal Python error: Aborted"):] if "Fatal Python error: Aborted" in output else ""
    threads = [block for block in dump.split("\n\n") if block.lstrip().startswith(("Thread", "Current thread"))]
    lines = []
    for block in threads:
        frames = [f.strip() for f in block.splitlines()[1:] if f.strip().startswith("File")]
        lines.append(f"[{block.splitlines()[0].strip()} {' <- '.join(frames[:4])}]")
    return " ".join(lines)[:1500] or "(none written)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anydev.conformance.mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="runs at a time (default: 2)")
    parser.add_argument("--tp", type=int, default=4, help="largest rank count of the collective and engine checks "
                        "(default: 4, as CI certifies the cpu backend; collectives run at 1, 2, 3 and 4 ranks)")
    parser.add_argument("--modules", default="", help="extra mutant modules to import (comma-separated import names)")
    parser.add_argument("--list", action="store_true", help="list the mutants and their faults, run nothing")
    args = parser.parse_args(argv)
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    if modules:
        os.environ[MODULES_ENV] = ",".join(filter(None, [os.environ.get(MODULES_ENV, ""), *modules]))
    known = all_mutants()
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(known)}")
    chosen = [known[n] for n in (args.names or known)]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.fault} [checks: {', '.join(m.checks)}]")
        return 0
    width = max(len(m.name) for m in chosen)
    with tempfile.TemporaryDirectory(prefix="anydev-mutants-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, m, Path(tmp), args.tp) for m in chosen]
        outcomes = []
        for future in futures:
            o = future.result()
            outcomes.append(o)
            print(f"{o.verdict.upper():8} {o.mutant.name:{width}}  ({o.seconds:5.1f} s) {o.detail}", flush=True)
    caught = sum(o.verdict == "caught" for o in outcomes)
    print(f"mutants caught: {caught}/{len(outcomes)}")
    for o in outcomes:
        if o.verdict != "caught":
            print(f"NOT CAUGHT: {o.mutant.name} ({o.mutant.fault}): {o.verdict}: {o.detail}")
        if o.hang:
            print(f"HUNG AFTER CATCHING: {o.mutant.name}: {o.hang}")
    return 0 if caught == len(outcomes) else 1


if __name__ == "__main__":
    from anydev.core.exits import exit_process, run_command

    exit_process(run_command(main))
