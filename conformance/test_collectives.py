"""Collectives: all_reduce (every op the backend offers), all_gather and broadcast, for every required
dtype, on 1..N thread ranks (one communicator, device, stream and thread per rank), against a torch
reference computed on the host; the same at 64 MiB on every rank count from 2; collectives in stream
order behind long work; errors of queued collectives reported at the next synchronize.

Inputs are small integers, so every dtype (bfloat16 included) holds them and the results exactly;
only ``avg`` (a division) is compared with a tolerance, the rounding bound of :func:`average_tolerance`.
"""
from __future__ import annotations

import pytest
import torch

from anydev.conformance.long_work import LongWork
from anydev.conformance.support import max_ranks, require_devices, require_torch_bridge, run_ranks
from anydev.plugin_api import REQUIRED_COLLECTIVE_DTYPES, AnydevError, Communicator
from anydev.plugin_api.types import REDUCE_OPS

COUNT = 1031  # elements per rank: odd, not a power of two
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32}
# avg of integers is left to the library (it truncates or rounds); the contract does not define it.
REDUCE_CASES = [(op, dt) for op in REDUCE_OPS for dt in REQUIRED_COLLECTIVE_DTYPES if (op, dt) != ("avg", "int32")]


def rank_input(rank: int, dtype: str, op: str = "sum") -> torch.Tensor:
    """Rank ``rank``'s input on the host: small integers (1 or 2 for prod, so 2**ranks stays exact)."""
    i = torch.arange(COUNT, dtype=torch.int64)
    values = (i + rank) % 2 + 1 if op == "prod" else (i * 7 + rank * 13) % 41 - 20
    return values.to(TORCH_DTYPES[dtype])


def reference_reduce(inputs: list[torch.Tensor], op: str, dtype: str) -> torch.Tensor:
    stacked = torch.stack([t.to(torch.float64) for t in inputs])
    result = {
        "sum": lambda: stacked.sum(0), "prod": lambda: stacked.prod(0), "max": lambda: stacked.max(0).values,
        "min": lambda: stacked.min(0).values, "avg": lambda: stacked.mean(0),
    }[op]()
    return result.to(TORCH_DTYPES[dtype])


def average_tolerance(inputs: list[torch.Tensor], dtype: str) -> torch.Tensor:
    """Per element, how far a correct ``avg`` in ``dtype`` may be from the exact mean.

    Libraries average in the reduced type: NCCL multiplies each input by 1/n rounded to the type, then
    sums, rounding every step (n + 1 roundings of terms no larger than |x_i| / n); others sum, then
    divide. Either stays within (n + 1) * eps * sum(|x_i|) / n, with eps the type's machine epsilon
    (twice the unit roundoff, a margin of 2). With cancelling inputs this bound is far wider than a
    relative tolerance on the mean, and a wrong average (no division, the wrong divisor, a rank left
    out) still misses it wherever the inputs do not cancel.
    """
    n = len(inputs)
    eps = torch.finfo(TORCH_DTYPES[dtype]).eps
    magnitude = torch.stack([t.to(torch.float64).abs() for t in inputs]).sum(0) / n
    return (n + 1) * eps * magnitude


def assert_average(got: torch.Tensor, inputs: list[torch.Tensor], dtype: str, what: str) -> None:
    """Fail unless ``got`` is the mean of ``inputs`` within :func:`average_tolerance`."""
    exact = torch.stack([t.to(torch.float64) for t in inputs]).mean(0)
    error = (got.to(torch.float64) - exact).abs()
    bad = error > average_tolerance(inputs, dtype)
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        pytest.fail(f"{what}: element {first} is {got[first].item()}, expected {exact[first].item()} "
                    f"(allowed error {average_tolerance(inputs, dtype)[first].item():.3g})", pytrace=False)


def close_all(comms) -> None:
    """Destroy communicators, all at once, each on its own thread: after a hung collective,
    ``comm_destroy`` may hang too, and the hang guard then fails the teardown instead of the session
    hanging without a report."""
    run_ranks(len(comms), lambda rank: comms[rank].close(), f"destroying {len(comms)} communicator(s)")


@pytest.fixture(scope="session")
def communicator_cache():
    """Communicators per (backend, rank count), created once per process and destroyed at the end."""
    cache: dict = {}
    yield cache
    for comms in cache.values():
        close_all(comms)


@pytest.fixture
def communicators(backend, communicator_cache, nranks):
    require_devices(backend, nranks)
    key = (backend.name, nranks)
    if key not in communicator_cache:
        communicator_cache[key] = backend.create_communicators([backend.device(i) for i in range(nranks)])
    comms = communicator_cache[key]
    assert [c.rank for c in comms] == list(range(nranks)) and all(c.nranks == nranks for c in comms)
    return comms


def run_collective(comms, inputs, recv_count: int, dtype: str, call) -> list[torch.Tensor]:
    """Per rank thread: copy ``inputs[rank]`` to the device, ``call(comm, send, recv, stream)``, copy
    ``recv`` back; return the host results in rank order."""
    torch_dtype = TORCH_DTYPES[dtype]
    itemsize = torch.empty((), dtype=torch_dtype).element_size()

    def rank_body(rank: int) -> torch.Tensor:
        comm = comms[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        send, recv = device.alloc(COUNT * itemsize), device.alloc(recv_count * itemsize)
        out = torch.empty(recv_count, dtype=torch_dtype)
        try:
            stream.memset_async(recv, 0xFF)  # so a collective that writes nothing cannot pass
            stream.memcpy_async(send, inputs[rank])
            call(comm, send, recv, stream)
            stream.memcpy_async(out, recv)
            stream.synchronize()
        finally:
            stream.synchronize()
            send.free()
            recv.free()
            stream.close()
        return out

    return run_ranks(len(comms), rank_body, "collective")


def assert_same(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    close = got == expected
    if not bool(close.all()):
        first = int((~close).nonzero()[0])
        pytest.fail(f"{what}: element {first} is {got[first].item()}, expected {expected[first].item()}", pytrace=False)


@pytest.mark.parametrize("op,dtype", REDUCE_CASES, ids=[f"{op}-{dt}" for op, dt in REDUCE_CASES])
def test_all_reduce(backend, communicators, op, dtype):
    if op not in backend.runtime.reduce_ops:
        pytest.skip(f"'{backend.name}' does not offer the optional reduce op '{op}'")
    n = len(communicators)
    inputs = [rank_input(r, dtype, op) for r in range(n)]
    results = run_collective(
        communicators, inputs, COUNT, dtype,
        lambda comm, send, recv, s: comm.all_reduce(send, recv, op=op, stream=s, count=COUNT, dtype=dtype),
    )
    for rank, got in enumerate(results):
        what = f"all_reduce {op} {dtype}, rank {rank} of {n}"
        if op == "avg":
            assert_average(got, inputs, dtype, what)
        else:
            assert_same(got, reference_reduce(inputs, op, dtype), what)


def test_communicators_from_a_unique_id(backend, nranks):
    """The multi-process path of the contract: every rank joins the group named by one unique id
    (``Communicator.from_unique_id``; here one thread per rank, as each process would), and the group
    then sums across its ranks."""
    require_devices(backend, nranks)
    unique_id = backend.comm_unique_id()
    assert isinstance(unique_id, bytes) and unique_id, f"comm_unique_id() returned {unique_id!r}"

    def join(rank: int) -> Communicator:
        device = backend.device(rank)
        device.set_current()
        return Communicator.from_unique_id(device, unique_id, nranks, rank)

    comms = run_ranks(nranks, join, f"{nranks} ranks joining one unique id")
    try:
        assert [(c.rank, c.nranks) for c in comms] == [(r, nranks) for r in range(nranks)]
        inputs = [rank_input(r, "float32") for r in range(nranks)]
        results = run_collective(
            comms, inputs, COUNT, "float32",
            lambda comm, send, recv, s: comm.all_reduce(send, recv, op="sum", stream=s, count=COUNT, dtype="float32"),
        )
        for rank, got in enumerate(results):
            assert_same(got, reference_reduce(inputs, "sum", "float32"), f"all_reduce over a unique id, rank {rank} of {nranks}")
    finally:
        close_all(comms)


@pytest.mark.parametrize("dtype", REQUIRED_COLLECTIVE_DTYPES)
def test_all_reduce_in_place(communicators, dtype):
    n = len(communicators)
    inputs = [rank_input(r, dtype) for r in range(n)]

    def in_place(comm, send, recv, s):
        comm.all_reduce(send, op="sum", stream=s, count=COUNT, dtype=dtype)
        s.memcpy_async(recv, send)

    results = run_collective(communicators, inputs, COUNT, dtype, in_place)
    expected = reference_reduce(inputs, "sum", dtype)
    for rank, got in enumerate(results):
        assert_same(got, expected, f"in-place all_reduce sum {dtype}, rank {rank} of {n}")


@pytest.mark.parametrize("dtype", REQUIRED_COLLECTIVE_DTYPES)
def test_all_gather(communicators, dtype):
    n = len(communicators)
    inputs = [rank_input(r, dtype) for r in range(n)]
    results = run_collective(
        communicators, inputs, n * COUNT, dtype,
        lambda comm, send, recv, s: comm.all_gather(send, recv, stream=s, count=COUNT, dtype=dtype),
    )
    expected = torch.cat(inputs)
    for rank, got in enumerate(results):
        assert_same(got, expected, f"all_gather {dtype}, rank {rank} of {n}")


@pytest.mark.parametrize("dtype", REQUIRED_COLLECTIVE_DTYPES)
def test_broadcast(communicators, dtype):
    n = len(communicators)
    root = n - 1  # not 0, so that a library ignoring `root` fails
    inputs = [rank_input(r, dtype) for r in range(n)]
    results = run_collective(
        communicators, inputs, COUNT, dtype,
        lambda comm, send, recv, s: comm.broadcast(send, recv, root=root, stream=s, count=COUNT, dtype=dtype),
    )
    for rank, got in enumerate(results):
        assert_same(got, inputs[root], f"broadcast {dtype} from root {root}, rank {rank} of {n}")


@pytest.mark.parametrize("dtype", REQUIRED_COLLECTIVE_DTYPES)
def test_collectives_on_torch_tensors(backend, communicator_cache, request, dtype):
    """On zero-copy torch views, inside one ``stream.torch_stream()`` block, as an engine's forward
    pass does: torch writes the input, then all_gather, broadcast and all_reduce (in place), then
    torch reads the result. Every step must see the one before it, on the largest rank count."""
    require_torch_bridge(backend)
    n = max_ranks(backend, request)
    require_devices(backend, n)
    key = (backend.name, n)
    if key not in communicator_cache:
        communicator_cache[key] = backend.create_communicators([backend.device(i) for i in range(n)])
    comms = communicator_cache[key]
    torch_dtype = TORCH_DTYPES[dtype]
    inputs = [rank_input(r, dtype) for r in range(n)]
    itemsize = inputs[0].element_size()

    def rank_body(rank: int):
        comm = comms[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        reduced, gathered = device.alloc(COUNT * itemsize), device.alloc(n * COUNT * itemsize)
        out = (torch.empty(COUNT, dtype=torch_dtype), torch.empty((n, COUNT), dtype=torch_dtype))
        try:
            t_reduced = reduced.as_tensor(torch_dtype, (COUNT,))
            t_gathered = gathered.as_tensor(torch_dtype, (n, COUNT))
            with stream.torch_stream():
                t_reduced.copy_(inputs[rank].to(t_reduced.device))  # torch writes
                comm.all_gather(t_reduced, t_gathered, stream=stream)
                comm.broadcast(t_reduced, root=n - 1, stream=stream)  # in place: rank n-1's input
                comm.all_reduce(t_reduced, op="sum", stream=stream)  # in place: n * that
                plus_one = t_reduced + 1  # torch reads the collective's result
                out[0].copy_(plus_one)  # a real copy: .to("cpu") could alias memory freed below
                out[1].copy_(t_gathered)
            stream.synchronize()
            return out
        finally:
            stream.synchronize()
            reduced.free()
            gathered.free()
            stream.close()

    results = run_ranks(n, rank_body, "collectives on torch tensors")
    expected = (reference_reduce([inputs[n - 1]] * n, "sum", dtype).to(torch.float64) + 1).to(torch_dtype)
    for rank, (got_reduced, got_gathered) in enumerate(results):
        assert_same(got_gathered.reshape(-1), torch.cat(inputs), f"torch all_gather {dtype}, rank {rank} of {n}")
        assert_same(got_reduced, expected, f"torch broadcast, all_reduce, then +1 {dtype}, rank {rank} of {n}")


LARGE_BYTES = 64 << 20  # per rank: far above the sizes where libraries switch algorithms and protocols


def tiled_input(rank: int, dtype: str, count: int) -> torch.Tensor:
    """``count`` elements of rank ``rank``'s small-integer pattern (period COUNT), cheap at 64 MiB."""
    pattern = rank_input(rank, dtype)
    return pattern.repeat(-(-count // COUNT))[:count].contiguous()


@pytest.mark.parametrize("dtype", REQUIRED_COLLECTIVE_DTYPES)
def test_collectives_at_64_mib(communicators, dtype):
    """all_reduce (sum) of 64 MiB, all_gather into 64 MiB and broadcast of 64 MiB, every element
    checked on every rank (2..N ranks): faults that appear only above some size or for one dtype fail."""
    n = len(communicators)
    if n < 2:
        pytest.skip("the 64 MiB collectives run on 2 ranks and more")
    torch_dtype = TORCH_DTYPES[dtype]
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    count = LARGE_BYTES // itemsize
    part = count // n  # all_gather: each rank's share of the 64 MiB
    inputs = [tiled_input(r, dtype, count) for r in range(n)]
    expected_sum = reference_reduce([rank_input(r, dtype) for r in range(n)], "sum", dtype).repeat(-(-count // COUNT))[:count]
    expected_gather = torch.cat([t[:part] for t in inputs])
    root = n - 1

    def rank_body(rank: int) -> str:
        comm = communicators[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        send, recv = device.alloc(count * itemsize), device.alloc(count * itemsize)
        out = torch.empty(count, dtype=torch_dtype)
        try:
            checks = (
                ("all_reduce sum", lambda: comm.all_reduce(send, recv, op="sum", stream=stream, count=count, dtype=dtype), expected_sum),
                ("all_gather", lambda: comm.all_gather(send, recv, stream=stream, count=part, dtype=dtype), expected_gather),
                (f"broadcast from root {root}", lambda: comm.broadcast(send, recv, root=root, stream=stream, count=count, dtype=dtype), inputs[root]),
            )
            for what, call, expected in checks:
                stream.memset_async(recv, 0xFF)
                stream.memcpy_async(send, inputs[rank])
                call()
                stream.memcpy_async(out, recv)
                stream.synchronize()
                wrong = (out[: expected.numel()] != expected).nonzero()
                if wrong.numel():
                    first = int(wrong[0])
                    return (f"{what} of {LARGE_BYTES >> 20} MiB {dtype}, rank {rank} of {n}: {wrong.numel()} wrong elements, "
                            f"the first at {first} (byte {first * itemsize}): {out[first].item()}, expected {expected[first].item()}")
            return ""
        finally:
            stream.synchronize()
            send.free()
            recv.free()
            stream.close()

    problems = [p for p in run_ranks(n, rank_body, f"64 MiB collectives {dtype}") if p]
    assert not problems, "; ".join(problems)


def test_collectives_run_in_stream_order(communicators):
    """A collective waits for the work enqueued before it on its stream (here long work that writes
    its send buffer), and the work enqueued after it waits for the collective."""
    n = len(communicators)
    nbytes = COUNT * 4

    def rank_body(rank: int) -> torch.Tensor:
        comm = communicators[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        long_work = LongWork(device, stream)
        send, recv = device.alloc(nbytes), device.alloc(nbytes)
        out = torch.zeros(COUNT, dtype=torch.int32)
        try:
            stream.memset_async(send, 0)
            stream.memset_async(recv, 0)
            stream.synchronize()
            long_work.enqueue(stream, final_value=1)  # every int32 of it: 0x01010101
            stream.memcpy_async(send, long_work.buf, nbytes)
            comm.all_reduce(send, recv, op="sum", stream=stream, count=COUNT, dtype="int32")
            stream.memcpy_async(out, recv)
            stream.synchronize()
            return out
        finally:
            stream.synchronize()
            long_work.free()
            send.free()
            recv.free()
            stream.close()

    results = run_ranks(n, rank_body, "collectives in stream order")
    expected = torch.full((COUNT,), n * 0x01010101, dtype=torch.int32)
    for rank, got in enumerate(results):
        assert_same(got, expected, f"all_reduce behind long work on its stream, rank {rank} of {n} "
                    "(a wrong value: the collective ran before the work enqueued ahead of it, or the copy after it ran first)")


def test_errors_of_queued_collectives_are_reported_at_synchronize(backend):
    """Ranks that call one collective with different counts make it fail on the stream; the next
    ``synchronize`` of each rank's stream raises an anydev error instead of returning normally.

    Host-memory backends only: on a GPU the way to make queued work fail is a device fault, which
    ends the process's device context (a sticky error), so this cannot run amid other checks; there
    the vendor runtime reports it at the next synchronize and the backend wraps the error code.
    """
    if backend.torch_device_type != "cpu":
        pytest.skip("provoking a failure of queued work on a GPU needs a device fault, which ends the device context")
    require_devices(backend, 2)
    comms = backend.create_communicators([backend.device(0), backend.device(1)])

    def rank_body(rank: int) -> str:
        comm = comms[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        count = COUNT + rank  # the ranks disagree
        buf = device.alloc(count * 4)
        try:
            stream.memset_async(buf, 0)
            comm.all_reduce(buf, op="sum", stream=stream, count=count, dtype="float32")
            try:
                stream.synchronize()
            except AnydevError as exc:
                return f"{type(exc).__name__}: {exc}"
            return ""
        finally:
            buf.free()
            stream.close()

    try:
        reported = run_ranks(2, rank_body, "a collective the ranks call with different counts")
    finally:
        close_all(comms)
    for rank, error in enumerate(reported):
        assert error, (f"rank {rank}: all_reduce with counts {COUNT} and {COUNT + 1} on its two ranks, yet synchronize() "
                       "returned normally: the error of the queued work was swallowed")
