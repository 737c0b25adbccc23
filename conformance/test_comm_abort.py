"""Communicator abort (optional, contract 1.4; skipped where ``backend.supports("comm_abort")`` is
false): a rank blocked in an all_reduce that its peer never joins is freed by ``abort()`` from another
thread, and an aborted communicator (idle or not) refuses every later collective, at the runtime and
at the object, while destroy still works.

The bound on the freed wait is a hang detector, not a timing: an abort ends the wait in milliseconds;
a wait that ends only by the backend's own collective timeout (or not at all) fails.
"""
from __future__ import annotations

import threading
import time

import pytest

from anydev.conformance.support import guarded, record_ranks, require_devices, run_ranks
from anydev.plugin_api import AnydevError, CollectiveAbortedError, CollectiveTimeoutError

COUNT = 1031
#: Seconds the blocked rank may take to be freed after the abort (shorter than the collective
#: timeouts of the host-memory backends in the conformance runs, so a no-op abort cannot pass).
ABORT_BOUND_S = 20.0


@pytest.fixture(autouse=True)
def require_comm_abort(backend):
    if not backend.supports("comm_abort"):
        pytest.skip(f"'{backend.name}' does not offer communicator abort (the optional call comm_abort, contract 1.4)")


def assert_refused(comm, buf, stream) -> None:
    """Collectives on the aborted ``comm`` fail with a typed error: the runtime's own call, and the object's."""
    runtime, address = comm.runtime, buf.address(0, COUNT * 4)
    try:
        runtime.all_reduce(address, address, COUNT, "float32", "sum", comm.handle, stream.handle)
    except AnydevError:
        pass   # refused, as it must be
    else:
        pytest.fail(f"{runtime.name}: all_reduce on an aborted communicator was accepted: comm_abort must make "
                    "every later call on it fail with a typed error", pytrace=False)
    with pytest.raises(CollectiveAbortedError, match="aborted"):
        comm.all_reduce(buf, stream=stream, count=COUNT, dtype="float32")


def test_abort_of_an_idle_communicator_refuses_later_collectives(backend):
    """One rank (runs on a single device): a collective works, then abort (twice: idempotent), then
    every collective is refused and destroy works."""
    [comm] = backend.create_communicators([backend.device(0)])
    device = comm.device
    device.set_current()
    stream = device.create_stream()
    buf = device.alloc(COUNT * 4)
    try:
        stream.memset_async(buf, 0)
        comm.all_reduce(buf, stream=stream, count=COUNT, dtype="float32")
        stream.synchronize()
        guarded(comm.abort, "comm_abort of an idle communicator", ABORT_BOUND_S)
        comm.abort()
        assert comm.aborted
        assert_refused(comm, buf, stream)
    finally:
        guarded(comm.close, "destroying an aborted communicator", ABORT_BOUND_S)
        _release(stream, buf)


def test_abort_frees_a_rank_blocked_on_a_peer_that_never_joins(backend, request):
    """Rank 0 enqueues an all_reduce and waits on its stream; rank 1 never joins. Two other threads
    abort both ranks' communicators at once (as the engine does with a broken group: an abort may
    wait for the node's other ranks to abort theirs, NCCL's can): rank 0's wait returns or raises
    (not a collective timeout) within ABORT_BOUND_S, later collectives are refused, and both
    communicators are destroyed."""
    require_devices(backend, 2)
    record_ranks(request, 2)
    comms = backend.create_communicators([backend.device(0), backend.device(1)])
    comm = comms[0]
    comm.device.set_current()
    stream = comm.device.create_stream()
    buf = comm.device.alloc(COUNT * 4)
    waiting = threading.Event()

    def body(role: int):
        if role == 0:   # rank 0: blocked in the all_reduce its peer never joins
            comm.device.set_current()
            stream.memset_async(buf, 0)
            comm.all_reduce(buf, stream=stream, count=COUNT, dtype="float32")
            waiting.set()
            try:
                stream.synchronize()
            except AnydevError as exc:
                return exc
            return None
        if not waiting.wait(ABORT_BOUND_S):   # the aborters, one per rank's communicator
            return None
        time.sleep(0.2)   # most likely inside the wait by now (either way the wait must end)
        comms[role - 1].abort()
        return None

    try:
        ended, _, _ = run_ranks(3, body, "a rank blocked in an all_reduce its peer never joins, then comm_abort "
                                "of both ranks' communicators from two other threads", ABORT_BOUND_S)
        assert not isinstance(ended, CollectiveTimeoutError), (
            f"the blocked wait ended by the collective timeout, not by the abort: {ended}")
        assert_refused(comm, buf, stream)
    finally:
        _destroy_broken(comms)
        _release(stream, buf)


def _destroy_broken(comms) -> None:
    """Destroy the communicators of a broken group, aborting (all at once) those not aborted yet: a
    failed check must not leave a live communicator whose peer was aborted, as destroying one may
    wait for that peer forever or end the process (NCCL)."""
    live = [c for c in comms if not c.aborted]
    if live:
        run_ranks(len(live), lambda i: live[i].abort(), "comm_abort of the group's other communicators", ABORT_BOUND_S)
    guarded(lambda: [c.close() for c in comms], "destroying aborted communicators", ABORT_BOUND_S)


def _release(stream, buf) -> None:
    def release():
        buf.free()
        stream.close()

    guarded(release, "releasing the stream of an aborted collective", ABORT_BOUND_S)
