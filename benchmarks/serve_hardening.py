"""The serving hardening figures, from the tests themselves: runs the overload, fault, fuzz and soak
tests of ``anydev serve`` (tests/serving/test_serve_hardening.py and the hostile-input and soak tests of
tests/serving/test_serve.py) on the cpu backend, each recording what it held and saw, and writes them to
``results/<date>-cpu-serve-hardening/`` (figures.json and figures.md, with date, machine and command).

    python benchmarks/serve_hardening.py                      # the CI sizes
    python benchmarks/serve_hardening.py --fuzz-examples 300  # schemathesis cases per endpoint

Bounded: every test bounds its requests and time; the whole run stops after --timeout seconds.
Exits non-zero when a test failed (the figures are still written, marked as such).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/serving/test_serve_hardening.py",
         "tests/serving/test_serve.py::test_arbitrary_completion_bodies_get_an_answer_or_a_400_never_a_5xx",
         "tests/serving/test_serve.py::test_arbitrary_chat_bodies_get_an_answer_or_a_400_never_a_5xx",
         "tests/serving/test_serve.py::test_the_server_is_healthy_after_the_hostile_input",
         "tests/serving/test_serve.py::test_a_soak_of_thousands_of_requests_leaves_threads_blocks_and_memory_where_they_were"]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def versions() -> dict:
    found = {}
    for name in ("torch", "fastapi", "uvicorn", "openai", "schemathesis", "hypothesis"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    found["anydev"] = commit.stdout.strip() or None
    return found


def cell(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


LOAD_KEYS = ("clients", "requests", "capacity_running", "capacity_waiting", "clients_killed", "stalled_clients",
             "slow_clients", "endpoints", "max_examples_per_endpoint", "checks", "inputs_tried")
COMMON_KEYS = ("server_errors_5xx", "requests_lost", "start", "end", "healthy_after", "waiting_after")


def summary(report: dict) -> str:
    """One row per scenario: its load, its outcome, 5xx, lost, and the resources at start -> end."""
    lines = ["| scenario | load | outcome | 5xx | lost | KV blocks in use, RSS MiB, threads (start -> end) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, f in report["scenarios"].items():
        load = ", ".join(f"{k.replace('_', ' ')} {f[k]}" for k in LOAD_KEYS if k in f)
        outcome = ", ".join(f"{k.replace('_', ' ')} {cell(v)}" for k, v in f.items()
                            if k not in LOAD_KEYS and k not in COMMON_KEYS)
        if "start" in f and "end" in f:
            a, b = f["start"], f["end"]
            resources = (f"{a['kv_blocks_used']} -> {b['kv_blocks_used']}, {a['rss_mib']} -> {b['rss_mib']}, "
                         f"{a['threads']} -> {b['threads']}")
        else:
            resources = f"{f['kv_blocks_used_at_exit']} at exit" if "kv_blocks_used_at_exit" in f else "-"
        lines.append(f"| {name} | {load} | {outcome} | {f.get('server_errors_5xx', '-')} | "
                     f"{f.get('requests_lost', '-')} | {resources} |")
    return "\n".join(lines) + "\n"


def markdown(report: dict) -> str:
    lines = [f"# anydev serve hardening figures ({report['date']})", "",
             f"- machine: {report['machine']}", f"- command: `{report['command']}`",
             f"- tests passed: {report['tests_passed']}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in report['versions'].items())}", "",
             summary(report), "All figures:", "", "| scenario | figures |", "| --- | --- |"]
    for name, figures in report["scenarios"].items():
        lines.append(f"| {name} | " + "; ".join(f"{k.replace('_', ' ')}: {cell(v)}" for k, v in figures.items()) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fuzz-examples", type=int, default=50, help="schemathesis cases per endpoint (default 50)")
    p.add_argument("--out", type=Path, default=None, help="folder (default results/<date>-cpu-serve-hardening)")
    p.add_argument("--timeout", type=int, default=1200, help="stop the run after this many seconds (default 1200)")
    args = p.parse_args()
    date = datetime.date.today().isoformat()
    out = args.out or ROOT / "results" / f"{date}-cpu-serve-hardening"
    with tempfile.TemporaryDirectory() as tmp:
        figures_file = Path(tmp) / "figures.json"
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   ANYDEV_SERVE_FIGURES=str(figures_file), ANYDEV_FUZZ_EXAMPLES=str(args.fuzz_examples))
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *TESTS]
        done = subprocess.run(command, cwd=ROOT, env=env, timeout=args.timeout)
        scenarios = json.loads(figures_file.read_text()) if figures_file.exists() else {}
    report = {"date": date, "device": "cpu", "machine": machine(),
              "command": shlex.join(["python", "benchmarks/serve_hardening.py", *sys.argv[1:]]),
              "tests": TESTS, "tests_passed": done.returncode == 0, "versions": versions(), "scenarios": scenarios}
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "figures.md").write_text(markdown(report))
    print(markdown(report))
    print(f"written to {out}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
