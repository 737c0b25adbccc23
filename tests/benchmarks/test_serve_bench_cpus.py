"""serve_bench's --client-cpus: the list is read as taskset reads it, and a client process moves to
those CPUs before it says it is up (Linux: sched_setaffinity)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench():
    sys.path.insert(0, str(BENCH))
    try:
        import serve_bench
    finally:
        sys.path.remove(str(BENCH))
    return serve_bench


def test_cpu_list_reads_ranges_and_singles():
    bench = _bench()
    assert bench.cpu_list("3") == [3]
    assert bench.cpu_list("4-6,0,2") == [0, 2, 4, 5, 6]
    assert bench.parse_args(["--client-cpus", "1-2"]).client_cpus == [1, 2]
    assert bench.parse_args([]).client_cpus is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity on this platform")
def test_a_client_process_moves_to_its_cpus_before_it_is_up():
    allowed = sorted(os.sched_getaffinity(0))
    target = allowed[-1]
    code = ("import os, sys, threading; sys.path.insert(0, sys.argv[1]); import serve_bench; "
            "serve_bench._started(threading.Barrier(1), {int(sys.argv[2])}); print(sorted(os.sched_getaffinity(0)))")
    done = subprocess.run([sys.executable, "-c", code, str(BENCH), str(target)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([target])
