"""Collectives over their domain: every dtype the backend declares (not only the required four) and
every op; counts from 0 up, at any element offset into the buffers, with guard elements around them
that nothing may write; broadcast from every root; communicators whose ranks sit on the devices in
any order, several communicators over the same devices used in any order, and ranks joining a
unique id in another order than their rank numbers.

Inputs are small integers, exact in every dtype (8-bit ones scaled to the rank count), so results are
compared exactly; ``avg`` is checked in ``test_collectives.py`` and left out here.
"""
from __future__ import annotations

import time

import pytest
import torch

from anydev.conformance.domains import bounded, example, given, st
from anydev.conformance.support import require_devices, require_torch_bridge, run_ranks
from anydev.conformance.test_collectives import close_all, communicator_cache, communicators  # noqa: F401 (fixtures)
from anydev.plugin_api import Communicator
from anydev.plugin_api.types import DTYPE_SIZES, REQUIRED_COLLECTIVE_DTYPES

TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPE_SIZES}
GUARD = 16  # elements before and after every buffer's range
EXACT_OPS = ("sum", "prod", "max", "min")


def values(rank: int, nranks: int, dtype: str, op: str, count: int, seed: int = 0) -> torch.Tensor:
    """Rank ``rank``'s input: small integers whose sum (or product) over ``nranks`` fits ``dtype``."""
    i = torch.arange(count, dtype=torch.int64) + seed
    if op == "prod":
        v = (i + rank) % 2 + 1                                   # 1 or 2: products up to 2**nranks
    elif dtype == "uint8":
        v = (i * 7 + rank * 13) % (255 // nranks + 1)
    elif dtype == "int8":
        bound = 127 // nranks
        v = (i * 7 + rank * 13) % (2 * bound + 1) - bound
    else:
        v = (i * 7 + rank * 13) % 41 - 20
    return v.to(TORCH_DTYPES[dtype])


def reduce(inputs: list[torch.Tensor], op: str, dtype: str) -> torch.Tensor:
    stacked = torch.stack([t.to(torch.float64) for t in inputs])
    out = {"sum": lambda: stacked.sum(0), "prod": lambda: stacked.prod(0),
           "max": lambda: stacked.max(0).values, "min": lambda: stacked.min(0).values}[op]()
    return out.to(TORCH_DTYPES[dtype])


def guarded_buffer(device, dtype: str, count: int, offset: int, fill: torch.Tensor | None):
    """A buffer of ``GUARD + offset + count + GUARD`` elements: guard bytes 0x7B everywhere, ``fill``
    (if any) at ``offset + GUARD``; returns the buffer, the view of the range and the whole view."""
    itemsize = DTYPE_SIZES[dtype]
    total = 2 * GUARD + offset + count
    buf = device.alloc(total * itemsize)
    whole = buf.as_tensor(TORCH_DTYPES[dtype], (total,))
    return buf, whole, GUARD + offset


def run_guarded(comms, dtype: str, send_count: int, recv_count: int, offsets: tuple[int, int], inputs, call):
    """Per rank: ``inputs[rank]`` at element ``offsets[0]`` (past a guard) of a send buffer, a recv
    buffer of ``recv_count`` at ``offsets[1]``, both surrounded by guard bytes; ``call(comm, send,
    recv, stream)`` on views of the ranges; returns each rank's whole recv buffer and whole send buffer."""
    def body(rank: int):
        comm = comms[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        sbuf, swhole, sat = guarded_buffer(device, dtype, send_count, offsets[0], inputs[rank])
        rbuf, rwhole, rat = guarded_buffer(device, dtype, recv_count, offsets[1], None)
        try:
            stream.memset_async(sbuf, 0x7B)
            stream.memset_async(rbuf, 0x7B)
            with stream.torch_stream():
                swhole[sat:sat + send_count].copy_(inputs[rank].to(swhole.device))
                call(comm, swhole[sat:sat + send_count], rwhole[rat:rat + recv_count], stream)
                got = (rwhole.cpu().clone(), swhole.cpu().clone())
            stream.synchronize()
            return got
        finally:
            stream.synchronize()
            sbuf.free()
            rbuf.free()
            stream.close()

    return run_ranks(len(comms), body, "collective on guarded buffers")


def guard_of(dtype: str, n: int) -> torch.Tensor:
    return torch.full((n * DTYPE_SIZES[dtype],), 0x7B, dtype=torch.uint8).view(TORCH_DTYPES[dtype])


def assert_guarded(whole: torch.Tensor, at: int, want: torch.Tensor, dtype: str, what: str) -> None:
    """``whole`` holds ``want`` at ``at`` and guard bytes everywhere else."""
    expected = guard_of(dtype, whole.numel()).clone()
    expected[at:at + want.numel()] = want
    same = whole.view(torch.uint8) == expected.view(torch.uint8)
    if not bool(same.all()):
        byte = int((~same).nonzero()[0])
        element = byte // DTYPE_SIZES[dtype]
        where = ("before the range" if element < at else "after the range" if element >= at + want.numel()
                 else f"element {element - at} of the range")
        pytest.fail(f"{what}: byte {byte} ({where}) is {int(whole.view(torch.uint8)[byte])}, "
                    f"expected {int(expected.view(torch.uint8)[byte])}", pytrace=False)


collective_cases = st.fixed_dictionaries({
    "kind": st.sampled_from(["all_reduce", "all_gather", "broadcast"]),
    "count": st.sampled_from([0, 1, 2, 3, 7, 255, 1025]) | st.integers(0, 3000),
    "offsets": st.tuples(st.integers(0, 7), st.integers(0, 7)),
    "op": st.sampled_from(EXACT_OPS),
    "dtype_pick": st.integers(0, 1 << 16),
    "root_pick": st.integers(0, 1 << 16),
})


@bounded(10)
@given(case=collective_cases)
@example(case={"kind": "all_reduce", "count": 0, "offsets": (0, 0), "op": "sum", "dtype_pick": 0, "root_pick": 0}).via("count 0")
@example(case={"kind": "all_gather", "count": 1, "offsets": (3, 5), "op": "sum", "dtype_pick": 3, "root_pick": 0}).via("one element, unaligned")
@example(case={"kind": "all_reduce", "count": 1031, "offsets": (1, 7), "op": "max", "dtype_pick": 1, "root_pick": 0}).via("ragged, offset")
def test_collectives_at_any_count_and_offset_write_only_their_range(backend, communicators, case):
    """all_reduce / all_gather / broadcast of ``count`` elements (0 included) at any element offset
    into their buffers, every declared dtype: the result is exact, the guard elements around the
    recv range are untouched, and the send buffer is unchanged."""
    require_torch_bridge(backend)
    n = len(communicators)
    declared = backend.runtime.collective_dtypes
    dtype = declared[case["dtype_pick"] % len(declared)]
    op = case["op"] if case["op"] in backend.runtime.reduce_ops else "sum"
    kind, count, offsets = case["kind"], case["count"], case["offsets"]
    root = case["root_pick"] % n
    inputs = [values(r, n, dtype, op if kind == "all_reduce" else "sum", count) for r in range(n)]
    recv_count = n * count if kind == "all_gather" else count
    calls = {
        "all_reduce": lambda comm, s, r, stream: comm.all_reduce(s, r, op=op, stream=stream),
        "all_gather": lambda comm, s, r, stream: comm.all_gather(s, r, stream=stream),
        "broadcast": lambda comm, s, r, stream: comm.broadcast(s, r, root=root, stream=stream),
    }
    want = {"all_reduce": lambda: reduce(inputs, op, dtype), "all_gather": lambda: torch.cat(inputs),
            "broadcast": lambda: inputs[root]}[kind]()
    results = run_guarded(communicators, dtype, count, recv_count, offsets, inputs, calls[kind])
    what = f"{kind}{' ' + op if kind == 'all_reduce' else ''}{f' from root {root}' if kind == 'broadcast' else ''} of {count} {dtype} at offsets {offsets}"
    for rank, (recv, send) in enumerate(results):
        assert_guarded(recv, GUARD + offsets[1], want, dtype, f"{what}, rank {rank} of {n}: recv")
        assert_guarded(send, GUARD + offsets[0], inputs[rank], dtype, f"{what}, rank {rank} of {n}: send buffer changed")


def test_all_reduce_of_every_declared_dtype_and_op(backend, communicators):
    """Every dtype of ``collective_dtypes`` beyond the required four (int8, uint8, float64, int64 ...)
    with every exact op of ``reduce_ops``, signed inputs for signed types."""
    require_torch_bridge(backend)
    n = len(communicators)
    optional = [d for d in backend.runtime.collective_dtypes if d not in REQUIRED_COLLECTIVE_DTYPES]
    if not optional:
        pytest.skip(f"'{backend.name}' declares only the required collective dtypes")
    count = 1031
    for dtype in optional:
        for op in (o for o in EXACT_OPS if o in backend.runtime.reduce_ops):
            inputs = [values(r, n, dtype, op, count) for r in range(n)]
            results = run_guarded(communicators, dtype, count, count, (0, 0), inputs,
                                  lambda comm, s, r, stream: comm.all_reduce(s, r, op=op, stream=stream))
            for rank, (recv, _) in enumerate(results):
                assert_guarded(recv, GUARD, reduce(inputs, op, dtype), dtype, f"all_reduce {op} {dtype}, rank {rank} of {n}")


def test_broadcast_from_every_root(backend, communicators):
    """broadcast from each rank in turn: every rank receives that root's data."""
    require_torch_bridge(backend)
    n = len(communicators)
    count = 517
    inputs = [values(r, n, "float32", "sum", count, seed=r * 101) for r in range(n)]
    for root in range(n):
        results = run_guarded(communicators, "float32", count, count, (0, 0), inputs,
                              lambda comm, s, r, stream: comm.broadcast(s, r, root=root, stream=stream))
        for rank, (recv, _) in enumerate(results):
            assert_guarded(recv, GUARD, inputs[root], "float32", f"broadcast from root {root}, rank {rank} of {n}")


def device_orders(count: int) -> list[list[int]]:
    """Device lists of the same devices in other orders: reversed, and rotated by one."""
    ordered = list(range(count))
    orders = [ordered[::-1]]
    if count >= 3:
        orders.append(ordered[1:] + ordered[:1])
    return orders


@pytest.mark.parametrize("order", ["reversed", "rotated"])
def test_communicators_over_devices_in_any_order(backend, request, order):
    """``create_communicators`` (``comm_init_all``) over the devices in another order: rank i lives
    on ``devices[i]``, so all_gather places rank i's data i-th and broadcast from root 0 sends what
    the rank on ``devices[0]`` holds."""
    require_torch_bridge(backend)
    top = request.config.getoption("anydev_tp") or backend.device_count()
    require_devices(backend, 2)
    n = min(top, backend.device_count())
    orders = device_orders(n)
    if order == "rotated" and len(orders) < 2:
        pytest.skip("a rotated device order needs 3 devices")
    devices = orders[0 if order == "reversed" else 1]
    request.node.user_properties.append(("anydev_ranks", n))
    comms = backend.create_communicators([backend.device(i) for i in devices])
    try:
        assert [c.device.index for c in comms] == devices, "create_communicators put ranks on other devices"
        count = 263
        inputs = [values(r, n, "int32", "sum", count, seed=1000 * r) for r in range(n)]
        gathered = run_guarded(comms, "int32", count, n * count, (0, 0), inputs,
                               lambda comm, s, r, stream: comm.all_gather(s, r, stream=stream))
        sent = run_guarded(comms, "int32", count, count, (0, 0), inputs,
                           lambda comm, s, r, stream: comm.broadcast(s, r, root=0, stream=stream))
    finally:
        close_all(comms)
    for rank in range(n):
        assert_guarded(gathered[rank][0], GUARD, torch.cat(inputs), "int32",
                       f"all_gather over devices {devices}, rank {rank} (device {devices[rank]})")
        assert_guarded(sent[rank][0], GUARD, inputs[0], "int32",
                       f"broadcast from root 0 (device {devices[0]}) over devices {devices}, rank {rank}")


def test_several_communicators_over_the_same_devices_in_any_order(backend, request):
    """Two groups over the same devices (and a third over the first two), their collectives
    interleaved on each rank's one stream (in the same order on every rank, as NCCL requires): each
    collective combines only its own group's ranks."""
    require_torch_bridge(backend)
    require_devices(backend, 2)
    n = min(request.config.getoption("anydev_tp") or backend.device_count(), backend.device_count())
    request.node.user_properties.append(("anydev_ranks", n))
    devices = [backend.device(i) for i in range(n)]
    groups = [backend.create_communicators(devices), backend.create_communicators(devices),
              backend.create_communicators(devices[:2])]
    count = 129
    sequence = [0, 1, 1, 2, 0, 2, 1, 0]  # which group each collective runs on

    def body(rank: int) -> list[torch.Tensor]:
        device = devices[rank]
        device.set_current()
        stream = device.create_stream()
        out = []
        bufs = []
        try:
            for step, g in enumerate(sequence):
                if rank >= len(groups[g]):
                    continue
                comm = groups[g][rank]
                buf = device.alloc((count + GUARD) * 4)  # slack: an overrun fails the guard checks, not the heap
                bufs.append(buf)
                t = buf.as_tensor(torch.int32, (count,))
                with stream.torch_stream():
                    t.copy_(values(rank, n, "int32", "sum", count, seed=step * 17 + g).to(t.device))
                    comm.all_reduce(t, op="sum", stream=stream)
                    out.append((step, t.cpu().clone()))
            stream.synchronize()
            return out
        finally:
            stream.synchronize()
            for buf in bufs:
                buf.free()
            stream.close()

    try:
        results = run_ranks(n, body, "collectives interleaved over three communicators")
    finally:
        for comms in groups:
            close_all(comms)
    for rank, got in enumerate(results):
        for step, tensor in got:
            g = sequence[step]
            members = len(groups[g])
            want = reduce([values(r, n, "int32", "sum", count, seed=step * 17 + g) for r in range(members)], "sum", "int32")
            assert torch.equal(tensor, want), (
                f"all_reduce {step} (communicator {g} of {members} ranks), rank {rank}: combined other ranks' data "
                "(collectives of different communicators over the same devices matched with each other?)")


#: Seconds between two ranks' calls of ``comm_init_rank`` in the join-order check: the highest rank
#: calls first. A schedule, not an assertion: a backend that does it right passes whatever the order.
JOIN_STAGGER_S = 0.3


def test_ranks_joining_a_unique_id_in_reverse_order_keep_their_ranks(backend, nranks):
    """``comm_init_rank`` called by the highest rank first and rank 0 last (each a moment after the
    one before): every rank keeps the rank it asked for, so all_gather places rank r's data r-th."""
    require_torch_bridge(backend)
    if nranks < 2:
        pytest.skip("a join order needs 2 ranks or more")
    require_devices(backend, nranks)
    unique_id = backend.comm_unique_id()

    def join(rank: int) -> Communicator:
        time.sleep(JOIN_STAGGER_S * (nranks - 1 - rank))
        device = backend.device(rank)
        device.set_current()
        return Communicator.from_unique_id(device, unique_id, nranks, rank)

    comms = run_ranks(nranks, join, f"{nranks} ranks joining one unique id, the last rank first")
    try:
        count = 131
        inputs = [values(r, nranks, "int32", "sum", count, seed=500 * r) for r in range(nranks)]
        gathered = run_guarded(comms, "int32", count, nranks * count, (0, 0), inputs,
                               lambda comm, s, r, stream: comm.all_gather(s, r, stream=stream))
    finally:
        close_all(comms)
    for rank in range(nranks):
        assert_guarded(gathered[rank][0], GUARD, torch.cat(inputs), "int32",
                       f"all_gather after the ranks joined last rank first, rank {rank} of {nranks}")
