"""``python -m anydev.conformance``: run the conformance suite on one backend, several, or all.

    python -m anydev.conformance --device cpu
    python -m anydev.conformance --device all --emulated moore,metax -n 2 --report out/conformance.json
    python -m anydev.conformance --device nvidia --tp 2 -- -k collectives -x
    python -m anydev.conformance --device cpu --quick -- -k kernels     # the interpreter-sized sweep

Options not listed here (and everything after ``--``) go to pytest unchanged. The checks run in
pytest-xdist workers (``-n``, default 1), so that a backend that crashes its process costs only the
check group it crashed in (``crashes.py``). Tracebacks and pytest's list of failures are off by
default (``--tb=no -rN``): the matrix and one line per failed check say what failed and why, so that
a new backend's first run (every call a stub) is a page, not thousands of lines; ``-- --tb=short
-rfE`` brings them back.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import pytest


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m anydev.conformance",
        description="Certify anydev backends: contract, memory, streams and events, collectives, "
        "parallel init and inference checks, with a JSON report and a Markdown matrix.",
    )
    parser.add_argument("--device", action="append", metavar="NAME",
                        help="backend(s): a name, a comma list, or 'all' (default: $ANYDEV_DEVICE or cpu)")
    parser.add_argument("--tp", type=int, metavar="N",
                        help="largest rank count for collectives, parallel init and inference (default: the backend's device count)")
    parser.add_argument("--report", metavar="FILE", help="write the JSON report to FILE and the matrix next to it")
    parser.add_argument("-n", "--numprocesses", metavar="K",
                        help="run the checks in K worker processes (pytest-xdist; 'auto' = one per core; default 1 "
                        "when pytest-xdist is installed). A check that crashes its worker costs only its group; "
                        "-n 0 runs in this process, where a crash ends the run without a report")
    parser.add_argument("--quick", action="store_true",
                        help="the kernels group's quick sweep (a few shapes, short contexts: for Triton's interpreter in "
                        "CI); the verdict then reads 'certified (quick sweep)'. Default: the full sweep, whatever the torch device")
    parser.add_argument("--emulated", metavar="VENDORS",
                        help="build emulated vendor runtimes (moore, metax) with gcc and certify the real plugins on them")
    return parser.parse_known_args(argv)


def pytest_args(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The pytest command line that runs the suite with these options."""
    out = [os.path.dirname(os.path.abspath(__file__)), "-p", "no:cacheprovider", "--tb=no", "-rN"]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        out += ["-p", "anydev.conformance.pytest_plugin"]
    for device in args.device or []:
        out += ["--device", device]
    if args.tp is not None:
        out += ["--tp", str(args.tp)]
    if args.report:
        out += ["--report", args.report]
    if args.emulated:
        out += ["--anydev-emulated", args.emulated]
    if args.quick:
        out.append("--quick")
    workers = args.numprocesses
    if workers is None:
        if importlib.util.find_spec("xdist") is not None:
            workers = "1"
        else:
            print("anydev.conformance: pytest-xdist is not installed, so the checks run in this process and a "
                  "crash of the backend ends the run without a report (pip install pytest-xdist)", file=sys.stderr)
    if workers is not None:
        out += ["-n", str(workers)]
    return out + [a for a in extra if a != "--"]


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(sys.argv[1:] if argv is None else argv)
    return int(pytest.main(pytest_args(args, extra)))


if __name__ == "__main__":
    raise SystemExit(main())
