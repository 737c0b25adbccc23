"""One rank process of the conformance suite's ``processes`` group (``test_processes.py``).

    python -m anydev.conformance.process_rank BACKEND RANK NRANKS STORE_PORT

Loads BACKEND (a mutant's name registers the mutant first), joins the group whose unique id rank 0
publishes in the c10d store on 127.0.0.1:STORE_PORT, runs all_reduce, all_gather, broadcast and, where
the backend offers them, send/recv on device RANK, and writes what it got back into the store.
"""
from __future__ import annotations

import pickle
import sys
from datetime import timedelta

import torch

COUNT = 1031   # elements per rank: odd, not a power of two


def rank_input(rank: int, count: int = COUNT) -> torch.Tensor:
    """Small integers (exact in float32 sums), different per rank."""
    i = torch.arange(count, dtype=torch.int64)
    return ((i * 7 + rank * 13) % 41).to(torch.float32)


def run(backend_name: str, rank: int, nranks: int, port: int) -> dict:
    import torch.distributed as dist

    from anydev.plugin_api import Communicator, load_backend

    if backend_name.startswith("mutant-"):
        from anydev.conformance.mutants import register_backends

        register_backends([backend_name.removeprefix("mutant-")])
    backend = load_backend(backend_name)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    device = backend.device(rank)
    device.set_current()
    if rank == 0:
        store.set("unique_id", backend.comm_unique_id())
    comm = Communicator.from_unique_id(device, store.get("unique_id"), nranks, rank)
    stream = device.create_stream()
    mine = rank_input(rank)
    results = {}

    def buffer(count: int, fill: torch.Tensor | None = None):
        buf = device.alloc(count * 4)
        host = torch.full((count,), -1.0) if fill is None else fill.clone()
        stream.memcpy_async(buf, host, count * 4)
        return buf

    def read(buf, count: int) -> list[float]:
        host = torch.empty(count, dtype=torch.float32)
        stream.memcpy_async(host, buf, count * 4)
        stream.synchronize()
        return host.tolist()

    send = buffer(COUNT, mine)
    summed = buffer(COUNT)
    comm.all_reduce(send, summed, op="sum", stream=stream, count=COUNT, dtype="float32")
    results["all_reduce"] = read(summed, COUNT)
    gathered = buffer(COUNT * nranks)
    comm.all_gather(send, gathered, stream=stream, count=COUNT, dtype="float32")
    results["all_gather"] = read(gathered, COUNT * nranks)
    root = nranks - 1
    sent = buffer(COUNT)
    comm.broadcast(send, sent, root=root, stream=stream, count=COUNT, dtype="float32")
    results["broadcast"] = read(sent, COUNT)
    if backend.supports("send"):   # a ring: each rank sends to the next and receives from the previous
        got = buffer(COUNT)
        with comm.group():
            comm.send(send, (rank + 1) % nranks, stream=stream, count=COUNT, dtype="float32")
            comm.recv(got, (rank - 1) % nranks, stream=stream, count=COUNT, dtype="float32")
        results["send_recv"] = read(got, COUNT)
    stream.synchronize()
    comm.close()
    return results


def main() -> None:
    backend_name, rank, nranks, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    results = run(backend_name, rank, nranks, port)
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    store.set(f"results/{rank}", pickle.dumps(results))


if __name__ == "__main__":
    main()
