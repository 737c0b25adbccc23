"""The example out-of-tree backend (examples/out_of_tree_backend, backend "hostdev").

The main check is the vendor's own: the whole conformance suite, run as a vendor runs it
(``python -m anydev.conformance --device hostdev --report FILE``), passes. It uses the installed
package (CI: ``pip install -e examples/out_of_tree_backend``) or, when that is missing, the source tree
with a dist-info written from its pyproject. A few checks of the example's own parts follow.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from dist_info import write_dist_info

from anydev.plugin_api import CollectiveTimeoutError, OutOfMemoryError, Registry, RuntimeCallError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "out_of_tree_backend"


def _installed() -> bool:
    return any(ep.name == "hostdev" for ep in importlib.metadata.entry_points(group="anydev.backends"))


@pytest.fixture(scope="module")
def hostdev_path(tmp_path_factory) -> list[str]:
    """Extra sys.path entries that make 'hostdev' discoverable (none when it is pip-installed)."""
    if _installed():
        return []
    meta = tmp_path_factory.mktemp("hostdev-dist-info")
    write_dist_info(EXAMPLE, into=meta)
    return [str(EXAMPLE), str(meta)]


@pytest.fixture
def hostdev_modules(hostdev_path, monkeypatch):
    for entry in hostdev_path:
        monkeypatch.syspath_prepend(entry)


def _conformance_available() -> bool:
    try:
        import anydev.conformance.__main__  # noqa: F401
    except ImportError:
        return False
    return True


def test_whole_conformance_suite_passes_on_hostdev(hostdev_path, tmp_path):
    if not _conformance_available():
        pytest.skip("the conformance suite (anydev.conformance) is not in this checkout yet")
    report_file = tmp_path / "hostdev.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(hostdev_path + [os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "hostdev", "--report", str(report_file)],
        env=env, capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    report = json.loads(report_file.read_text())
    checks = [c for c in report["checks"] if c["backend"] == "hostdev"]
    failed = [f"{c['check']}: {c['reason']}" for c in checks if c["status"] not in ("pass", "skip")]
    assert not failed, failed
    passed_groups = {c["group"] for c in checks if c["status"] == "pass"}
    # No group only skipped, but the device-graph, send/recv and comm_abort groups (hostdev does not
    # offer the optional torch_graph, send, recv and comm_abort) and the processes group (its groups are
    # threads of one process).
    assert passed_groups == {c["group"] for c in checks} - {"graphs", "send_recv", "comm_abort", "processes"}, \
        report["summary"]
    process_skips = {c["reason"] for c in checks if c["group"] == "processes"}
    assert process_skips == {"'hostdev' (host CPU (hostdev example backend)) joins communicators of one process only "
                             "(cross_process_collectives = False)"}, process_skips
    send_recv_skips = {c["reason"] for c in checks if c["group"] == "send_recv"}
    assert send_recv_skips == {"'hostdev' does not offer point-to-point send/recv (the optional calls send, recv, "
                               "group_start and group_end, contract 1.3)"}, send_recv_skips
    abort_skips = {c["reason"] for c in checks if c["group"] == "comm_abort"}
    assert abort_skips == {"'hostdev' does not offer communicator abort (the optional call comm_abort, contract 1.4)"}, \
        abort_skips
    graph_skips = {c["reason"] for c in checks if c["group"] == "graphs"}
    assert graph_skips == {"'hostdev' does not capture device graphs (the optional call torch_graph, contract 1.1)"}, graph_skips
    assert report["verdicts"]["hostdev"]["verdict"] == "certified"
    assert {"contract", "memory"} <= passed_groups, report["summary"]
    assert report["hardware"]["hostdev"] == "host CPU (hostdev example backend)"


# ---- the example's own parts -----------------------------------------------------------------

def test_hostdev_is_registered_from_its_entry_point(hostdev_modules):
    registry = Registry()
    assert "hostdev" in registry.plugins, registry.broken.get("hostdev")
    assert "entry point hostdev = anydev_hostdev.plugin" in registry.sources["hostdev"]


def test_arena_reuses_and_merges_freed_blocks(hostdev_modules):
    from anydev_hostdev.arena import Arena

    arena = Arena(base=4096, size=4 * 256)
    a, b, c = arena.alloc(1), arena.alloc(256), arena.alloc(200)
    assert [a, b, c] == [4096, 4096 + 256, 4096 + 512]
    assert arena.alloc(512) is None  # only 256 bytes left
    arena.release(b)
    arena.release(a)
    assert arena.largest_free_block() == 512  # a and b merged
    assert arena.alloc(512) == 4096
    assert not arena.release(4096 + 1)
    assert arena.holds(c + 10, 100) and not arena.holds(c + 10, 300)


def test_oversize_alloc_is_out_of_memory_naming_the_setting(hostdev_modules, monkeypatch):
    monkeypatch.setenv("ANYDEV_HOSTDEV_MEMORY_MB", "1")
    from anydev_hostdev.runtime import HostDevRuntime

    runtime = HostDevRuntime()
    with pytest.raises(OutOfMemoryError, match="ANYDEV_HOSTDEV_MEMORY_MB") as raised:
        runtime.malloc(2 << 20)
    assert raised.value.error_name == "hostdevErrorMemoryAllocation" and raised.value.call == "malloc"
    runtime.close()


def test_error_in_stream_work_is_raised_by_the_next_synchronize(hostdev_modules):
    from anydev_hostdev.runtime import HostDevRuntime

    runtime = HostDevRuntime()
    stream = runtime.stream_create()

    def fails():
        raise RuntimeCallError("hostdev", "kernel", 1, "hostdevErrorInvalidValue", "bad launch")

    runtime._streams[stream].enqueue(fails)
    with pytest.raises(RuntimeCallError, match="bad launch"):
        runtime.stream_synchronize(stream)
    runtime.stream_synchronize(stream)  # reported once, like a consumed CUDA error
    runtime.close()


def test_collective_with_a_missing_rank_times_out_instead_of_hanging(hostdev_modules, monkeypatch):
    monkeypatch.setenv("ANYDEV_HOSTDEV_COLLECTIVE_TIMEOUT_S", "0.2")
    from anydev_hostdev.runtime import HostDevRuntime

    runtime = HostDevRuntime()
    comms = runtime.comm_init_all([0, 1])
    buffer = runtime.malloc(16)
    stream = runtime.stream_create()
    runtime.all_reduce(buffer, buffer, 4, "float32", "sum", comms[0], stream)  # rank 1 never calls
    with pytest.raises(CollectiveTimeoutError, match="rank 0 of 2"):
        runtime.stream_synchronize(stream)
    runtime.free(buffer)
    runtime.close()


def test_comm_init_rank_joins_threads_by_unique_id(hostdev_modules):
    from anydev_hostdev.runtime import HostDevRuntime

    runtime = HostDevRuntime()
    unique_id = runtime.comm_unique_id()
    handles = [None, None]

    def join(rank):
        runtime.set_device(rank)
        handles[rank] = runtime.comm_init_rank(unique_id, 2, rank)

    threads = [threading.Thread(target=join, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(handles) and handles[0] != handles[1]
    group0, rank0 = runtime._comms[handles[0]]
    group1, rank1 = runtime._comms[handles[1]]
    assert group0 is group1 and (rank0, rank1) == (0, 1)
    runtime.close()
