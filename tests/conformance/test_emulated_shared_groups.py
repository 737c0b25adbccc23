"""The emulated MCCL's groups across processes (CommInitRank over POSIX shared memory): two rank
processes of the real moore and metax plugins exchange collectives and messages, a message larger
than one staging chunk arrives whole, and nothing is left in /dev/shm; a rank whose peer never joins
gets an error, not a hang, and leaves nothing either."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anydev.conformance.emulated import build_emulated_runtime
from anydev.plugin_api import Communicator, Registry, RuntimeCallError

SHM = Path("/dev/shm")
RANK = textwrap.dedent('''
    import sys, torch
    from anydev.plugin_api import Communicator, load_backend
    vendor, rank, uid = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
    backend = load_backend(vendor)
    device = backend.device(rank)
    device.set_current()
    comm = Communicator.from_unique_id(device, uid, 2, rank)
    stream = device.create_stream()
    n = 300_000                        # 1.2 MB of float32: more than one 256 KiB staging chunk
    mine = torch.arange(n, dtype=torch.float32) + 1000 * rank
    buf, got, gathered = device.alloc(n * 4), device.alloc(n * 4), device.alloc(2 * n * 4)
    stream.memcpy_async(buf, mine)
    comm.all_reduce(buf, got, stream=stream, count=n, dtype="float32")
    comm.all_gather(buf, gathered, stream=stream, count=n, dtype="float32")
    message = device.alloc(n * 4)
    with comm.group():
        comm.send(buf, 1 - rank, stream=stream, count=n, dtype="float32")
        comm.recv(message, 1 - rank, stream=stream, count=n, dtype="float32")
    out = [torch.empty(n), torch.empty(2 * n), torch.empty(n)]
    for host, dev in zip(out, (got, gathered, message)):
        stream.memcpy_async(host, dev)
    stream.synchronize()
    other = torch.arange(n, dtype=torch.float32) + 1000 * (1 - rank)
    assert torch.equal(out[0], mine + other), "all_reduce"
    assert torch.equal(out[1], torch.cat([mine, other] if rank == 0 else [other, mine])), "all_gather"
    assert torch.equal(out[2], other), "send/recv"
    comm.close()
    print("rank ok")
''')


def segments() -> set[str]:
    return {p.name for p in SHM.glob("anydev-mccl-*")} if SHM.is_dir() else set()


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler (gcc) to build the emulated runtimes")
    if not SHM.is_dir():
        pytest.skip("no /dev/shm (POSIX shared memory) on this machine")
    return tmp_path_factory.mktemp("emulated")


@pytest.mark.parametrize("vendor", ["moore", "metax"])
def test_two_rank_processes_exchange_collectives_and_messages(build_dir, vendor, tmp_path):
    env = {**os.environ, **build_emulated_runtime(vendor, build_dir), "OMP_NUM_THREADS": "1"}
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    uid = subprocess.run([sys.executable, "-c", f"from anydev.plugin_api import load_backend; "
                          f"print(load_backend('{vendor}').comm_unique_id().hex())"],
                         env=env, capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    before = segments()
    ranks = [subprocess.Popen([sys.executable, str(script), vendor, str(r), uid], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    logs = [p.communicate(timeout=180)[0] for p in ranks]
    for r, (p, log) in enumerate(zip(ranks, logs)):
        assert p.returncode == 0 and "rank ok" in log, f"rank {r}:\n{log[-3000:]}"
    assert segments() <= before, f"left in /dev/shm: {sorted(segments() - before)}"


def test_a_rank_whose_peer_never_joins_fails_and_leaves_nothing(build_dir, monkeypatch):
    for name, value in build_emulated_runtime("moore", build_dir).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANYDEV_EMULATED_COLLECTIVE_TIMEOUT", "0.5")
    backend = Registry(builtin_modules=("anydev.backends.moore.plugin",), entry_point_group=None).load("moore")
    before = segments()
    device = backend.device(0)
    device.set_current()
    with pytest.raises(RuntimeCallError, match="did not join in time"):
        Communicator.from_unique_id(device, backend.comm_unique_id(), 2, 0)
    assert segments() <= before, f"left in /dev/shm: {sorted(segments() - before)}"
