"""Point-to-point send/recv (optional, contract 1.3; skipped where ``backend.supports("send")`` is
false): a ring pass in one group for every dtype the backend offers, the same at 64 MiB, several
messages between a pair arriving in the order sent, send and recv in stream order behind long work,
a chain of ranks on torch tensors inside ``torch_stream`` (what a pipeline-parallel engine does), and
the peer checks of the contract.

Receive buffers are filled with 0xFF first, so a recv that writes nothing cannot pass; inputs differ
per rank and per message, so a message delivered to the wrong rank or out of order fails.
"""
from __future__ import annotations

import pytest
import torch

from anydev.conformance.long_work import LongWork
from anydev.conformance.support import require_devices, require_torch_bridge, run_ranks
from anydev.plugin_api import DTYPE_SIZES, InvalidArgumentError

COUNT = 1031  # elements per message: odd, not a power of two
TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
    "float64": torch.float64, "int64": torch.int64, "int8": torch.int8, "uint8": torch.uint8,
}
LARGE_BYTES = 64 << 20


def require_send_recv(backend) -> None:
    if not backend.supports("send"):
        pytest.skip(f"'{backend.name}' does not offer point-to-point send/recv (the optional calls send, recv, "
                    "group_start and group_end, contract 1.3)")


def require_dtype(backend, dtype: str) -> None:
    if dtype not in backend.runtime.collective_dtypes:
        pytest.skip(f"'{backend.name}' does not offer the optional collective dtype '{dtype}'")


def message(rank: int, dtype: str, count: int = COUNT, index: int = 0) -> torch.Tensor:
    """Message ``index`` of rank ``rank``: small non-negative integers (exact in every dtype), a
    pattern of period 41 shifted per rank and per message."""
    i = torch.arange(count, dtype=torch.int64)
    return ((i * 7 + rank * 13 + index * 5) % 41).to(TORCH_DTYPES[dtype])


@pytest.fixture(scope="module")
def communicator_cache():
    cache: dict = {}
    yield cache
    for comms in cache.values():
        run_ranks(len(comms), lambda rank, comms=comms: comms[rank].close(), "destroying communicators")


@pytest.fixture
def communicators(backend, communicator_cache, nranks):
    require_send_recv(backend)
    if nranks < 2:
        pytest.skip("send/recv needs 2 ranks or more")
    require_devices(backend, nranks)
    key = (backend.name, nranks)
    if key not in communicator_cache:
        communicator_cache[key] = backend.create_communicators([backend.device(i) for i in range(nranks)])
    return communicator_cache[key]


def first_difference(got: torch.Tensor, expected: torch.Tensor, what: str) -> str:
    """'' when equal, else a sentence naming the first wrong element."""
    wrong = (got != expected).nonzero()
    if not wrong.numel():
        return ""
    first = int(wrong[0])
    return f"{what}: {wrong.numel()} wrong elements, the first at {first}: {got[first].item()}, expected {expected[first].item()}"


def ring_pass(comms, dtype: str, count: int) -> list[str]:
    """Every rank sends its message to the next rank and receives the previous one's, in one group."""
    n = len(comms)
    itemsize = DTYPE_SIZES[dtype]

    def rank_body(rank: int) -> str:
        comm = comms[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        send, recv = device.alloc(count * itemsize), device.alloc(count * itemsize)
        out = torch.empty(count, dtype=TORCH_DTYPES[dtype])
        try:
            stream.memset_async(recv, 0xFF)
            stream.memcpy_async(send, message(rank, dtype, count))
            with comm.group():
                comm.send(send, (rank + 1) % n, stream=stream, count=count, dtype=dtype)
                comm.recv(recv, (rank - 1) % n, stream=stream, count=count, dtype=dtype)
            stream.memcpy_async(out, recv)
            stream.synchronize()
            return first_difference(out, message((rank - 1) % n, dtype, count),
                                    f"ring pass of {count} {dtype}, rank {rank} of {n} receiving from rank {(rank - 1) % n}")
        finally:
            stream.synchronize()
            send.free()
            recv.free()
            stream.close()

    return [p for p in run_ranks(n, rank_body, f"send/recv ring pass {dtype}") if p]


@pytest.mark.parametrize("dtype", list(DTYPE_SIZES))
def test_ring_pass(backend, communicators, dtype):
    require_dtype(backend, dtype)
    problems = ring_pass(communicators, dtype, COUNT)
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_ring_pass_at_64_mib(backend, communicators, dtype):
    """Every element of a 64 MiB message checked: faults above some size (chunking, protocols) fail."""
    problems = ring_pass(communicators, dtype, LARGE_BYTES // DTYPE_SIZES[dtype])
    assert not problems, "; ".join(problems)


def test_messages_between_a_pair_arrive_in_the_order_sent(communicators):
    """Rank 0 sends four different messages to the last rank (no group: a one-way chain needs none);
    the last rank's four recvs get them in the order sent. The recvs wait behind long work on their
    stream, so all four messages are on their way before the first recv runs (a backend that mixes
    up waiting messages is then caught whatever the timing)."""
    n, dtype, messages = len(communicators), "float32", 4
    last = n - 1

    def rank_body(rank: int) -> str:
        if rank not in (0, last):
            return ""
        comm = communicators[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        bufs = [device.alloc(COUNT * 4) for _ in range(messages)]
        outs = [torch.empty(COUNT, dtype=torch.float32) for _ in range(messages)]
        long_work = LongWork(device, stream) if rank == last else None
        try:
            if long_work is not None:
                long_work.enqueue(stream, final_value=0)
            for i, buf in enumerate(bufs):
                if rank == 0:
                    stream.memcpy_async(buf, message(0, dtype, index=i))
                    comm.send(buf, last, stream=stream, count=COUNT, dtype=dtype)
                else:
                    stream.memset_async(buf, 0xFF)
                    comm.recv(buf, 0, stream=stream, count=COUNT, dtype=dtype)
            if rank == 0:
                stream.synchronize()
                return ""
            for buf, out in zip(bufs, outs):
                stream.memcpy_async(out, buf)
            stream.synchronize()
            return "; ".join(filter(None, (
                first_difference(out, message(0, dtype, index=i), f"recv {i} of {messages} from rank 0 on rank {last}")
                for i, out in enumerate(outs))))
        finally:
            stream.synchronize()
            for buf in bufs:
                buf.free()
            if long_work is not None:
                long_work.free()
            stream.close()

    problems = [p for p in run_ranks(n, rank_body, "several messages between a pair") if p]
    assert not problems, ("; ".join(problems) + " (messages between two ranks must be received in the order sent)")


def test_send_and_recv_run_in_stream_order(communicators):
    """The send reads its buffer after the long work enqueued before it wrote it (bytes 1); on the
    receiver, the recv writes its buffer after the long work and copy enqueued before it (bytes 2),
    and the copy enqueued after it sees the message. A send that reads too early sends zeros; a
    recv that writes too early is overwritten by the 2s."""
    n, nbytes = len(communicators), COUNT * 4

    def rank_body(rank: int):
        if rank > 1:
            return None
        comm = communicators[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        long_work = LongWork(device, stream)
        buf = device.alloc(nbytes)
        out = torch.zeros(COUNT, dtype=torch.int32)
        try:
            stream.memset_async(buf, 0)
            stream.synchronize()
            long_work.enqueue(stream, final_value=1 if rank == 0 else 2)
            stream.memcpy_async(buf, long_work.buf, nbytes)
            if rank == 0:
                comm.send(buf, 1, stream=stream, count=COUNT, dtype="int32")
            else:
                comm.recv(buf, 0, stream=stream, count=COUNT, dtype="int32")
                stream.memcpy_async(out, buf)
            stream.synchronize()
            return out
        finally:
            stream.synchronize()
            long_work.free()
            buf.free()
            stream.close()

    got = run_ranks(n, rank_body, "send/recv in stream order")[1]
    problem = first_difference(got, torch.full((COUNT,), 0x01010101, dtype=torch.int32),
                               "rank 1's recv from rank 0, both behind long work on their streams")
    assert not problem, problem + " (0: the send read its buffer before the work ahead of it; 0x02020202: the recv ran before it)"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_chain_on_torch_tensors(backend, communicators, dtype):
    """A pipeline: inside ``torch_stream()``, rank r receives a tensor from rank r-1, adds 1 with
    torch and sends the result to rank r+1; the last rank holds the first rank's input + n-1."""
    require_torch_bridge(backend)
    n = len(communicators)
    torch_dtype = TORCH_DTYPES[dtype]
    start = message(0, dtype)

    def rank_body(rank: int):
        comm = communicators[rank]
        device = comm.device
        device.set_current()
        stream = device.create_stream()
        buf = device.alloc(COUNT * DTYPE_SIZES[dtype])
        out = torch.empty(COUNT, dtype=torch_dtype)
        try:
            x = buf.as_tensor(torch_dtype, (COUNT,))
            with stream.torch_stream():
                if rank == 0:
                    x.copy_(start.to(x.device))
                else:
                    x.fill_(-1)
                    comm.recv(x, rank - 1, stream=stream)
                    x.add_(1)                                   # torch reads what the recv wrote
                if rank < n - 1:
                    comm.send(x, rank + 1, stream=stream)
                else:
                    out.copy_(x)
            stream.synchronize()
            return out
        finally:
            stream.synchronize()
            buf.free()
            stream.close()

    got = run_ranks(n, rank_body, f"a chain of {n} ranks on torch tensors")[n - 1]
    problem = first_difference(got, (start.to(torch.float64) + (n - 1)).to(torch_dtype),
                               f"rank {n - 1} after {n - 1} hops of recv, +1, send ({dtype})")
    assert not problem, problem


@pytest.mark.contract_shape
def test_peer_must_be_another_rank_of_the_group(communicators):
    comm = communicators[0]
    device = comm.device
    device.set_current()
    stream = device.create_stream()
    buf = device.alloc(16)
    try:
        for peer in (0, comm.nranks, -1):
            with pytest.raises(InvalidArgumentError, match="peer"):
                comm.send(buf, peer, stream=stream, count=4, dtype="float32")
            with pytest.raises(InvalidArgumentError, match="peer"):
                comm.recv(buf, peer, stream=stream, count=4, dtype="float32")
    finally:
        buf.free()
        stream.close()
