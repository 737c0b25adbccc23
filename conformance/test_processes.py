"""Collectives across processes: the contract's multi-process path (``comm_unique_id`` in one
process, ``comm_init_rank`` in every process of the group), as torchrun-launched engines use it.

Two rank processes (``anydev.conformance.process_rank``) on devices 0 and 1 exchange the unique id
through a c10d store, then run all_reduce, all_gather, broadcast and (where offered, contract 1.3)
send/recv in a ring; this process checks what each got. Backends whose groups are threads of one
process (``cross_process_collectives = False``) skip, saying so.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from datetime import timedelta

import pytest
import torch

from anydev.conformance.process_rank import COUNT, rank_input
from anydev.conformance.support import record_ranks, require_devices

NRANKS = 2
TIMEOUT_S = 120


def test_collectives_across_processes(backend, request):
    if not backend.runtime.cross_process_collectives:
        pytest.skip(f"'{backend.name}' ({backend.runtime.hardware_label}) joins communicators of one process only "
                    "(cross_process_collectives = False)")
    require_devices(backend, NRANKS)
    record_ranks(request, NRANKS)
    results = _run_ranks(backend.name)
    inputs = [rank_input(r) for r in range(NRANKS)]
    expected = {
        "all_reduce": sum(inputs).tolist(),
        "all_gather": torch.cat(inputs).tolist(),
        "broadcast": inputs[NRANKS - 1].tolist(),
    }
    for r, got in enumerate(results):
        for call, want in expected.items():
            wrong = _first_difference(got[call], want)
            assert wrong is None, f"{call} across {NRANKS} processes: rank {r} got a wrong result ({wrong})"
        if backend.supports("send"):
            wrong = _first_difference(got["send_recv"], inputs[(r - 1) % NRANKS].tolist())
            assert wrong is None, \
                f"send/recv across {NRANKS} processes: rank {r} did not get rank {(r - 1) % NRANKS}'s message ({wrong})"
    assert len(expected["all_reduce"]) == COUNT


def _first_difference(got: list, want: list) -> str | None:
    """Where two result lists differ, in words; None where they are equal. The assertion reads a bool,
    not the lists: pytest's own diff of two thousand-element lists of repeating values runs for minutes."""
    if len(got) != len(want):
        return f"{len(got)} elements, expected {len(want)}"
    wrong = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if not wrong:
        return None
    first = wrong[0]
    return f"{len(wrong)} wrong elements, the first at {first}: {got[first]}, expected {want[first]}"


def _run_ranks(backend_name: str) -> list[dict]:
    """Each rank process's results. The master store lives only in this call: a failing assertion's
    traceback (which pytest keeps until the interpreter exits) holds no store server or rank process."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=TIMEOUT_S))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen([sys.executable, "-m", "anydev.conformance.process_rank", backend_name, str(rank),
                               str(NRANKS), str(store.port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for rank in range(NRANKS)]
    try:
        logs = [rank.communicate(timeout=TIMEOUT_S)[0] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
    failed = [f"rank process {r} exited with {rank.returncode}:\n{log[-3000:]}"
              for r, (rank, log) in enumerate(zip(ranks, logs)) if rank.returncode != 0]
    results = [] if failed else [pickle.loads(store.get(f"results/{r}")) for r in range(NRANKS)]
    del store   # before any raise, for the traceback's sake
    assert not failed, "\n".join(failed)
    return results
