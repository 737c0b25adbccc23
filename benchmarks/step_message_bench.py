"""One step's message from rank 0 to N reader processes of this machine, side by side in one run:

* ``gloo+pickle``: the message pickled (tensors as raw bytes) and broadcast over gloo as its size
  then its bytes: the control path of every rank before the shared-memory queue;
* ``gloo``: the step message of ``anydev.core.executors.step_message`` (msgpack header + packed
  batch bytes) over the same two broadcasts: the path of ranks on other machines now;
* ``queue``: the same bytes through ``anydev.core.executors.shm_queue``: the path of the ranks of
  rank 0's machine now.

    python benchmarks/step_message_bench.py                          # readers 1 and 3, batch 1 and 32
    python benchmarks/step_message_bench.py --readers 1,3,7 --out results/step_message.json

Each message is a decode step as the engine sends it (``forward``: the packed StepBatch of B rows
with block tables ``--blocks`` wide, each row's SamplingParams and seed, the ended sequences). A
message's time runs from rank 0 starting to send it until every reader has decoded it back into a
StepBatch and said so in a shared-memory counter that rank 0 spins on (the same acknowledgement for
every path). Each repetition times ``--messages`` messages of every path in turn (the order rotates,
so drift hits all alike); the table gives the median µs per message over the repetitions and the
ratios to the queue. Readers spin while waiting, as the rank processes do: give each process a core.
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import pickle
import platform
import shlex
import statistics
import sys
import time
from datetime import timedelta

import numpy as np
import torch

PATHS = ("gloo+pickle", "gloo", "queue")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--readers", default="1,3", help="reader processes (the other ranks of the machine), e.g. 1,3,7")
    p.add_argument("--batch-sizes", default="1,32", help="decode rows per step")
    p.add_argument("--blocks", type=int, default=256, help="block-table width (4096-token context, blocks of 16)")
    p.add_argument("--messages", type=int, default=200, help="messages per path per repetition")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


def step_message(seq: int, rows: int, blocks: int) -> tuple:
    """A decode step of ``rows`` sequences as the engine sends it to the other ranks."""
    from anydev.core.models.batch import StepBatch
    from anydev.core.sched.sampling import SamplingParams

    rng = np.random.default_rng(rows)
    batch = StepBatch.pack(dict(
        input_ids=rng.integers(0, 32000, rows), positions=rng.integers(0, 4096, rows),
        slot_mapping=rng.integers(0, 1 << 20, rows), last_index=np.arange(rows), cu_seqlens_q=np.arange(rows + 1),
        seq_lens=rng.integers(1, 4096, rows), block_tables=rng.integers(0, 1 << 16, (rows, blocks))), max_q_len=1)
    sampling = [SamplingParams(max_new_tokens=128, ignore_eos=True) for _ in range(rows)]
    return (seq, False, None, "call", "forward", (batch, sampling, [None] * rows, True, None, ()), None)


def schedule(args) -> list[tuple[int, int, list[str], int]]:
    """(readers, rows, paths in this repetition's order, messages) of every timed block, warm-up first."""
    blocks = []
    for readers in [int(n) for n in args.readers.split(",")]:
        for rows in [int(b) for b in args.batch_sizes.split(",")]:
            blocks.append((readers, rows, list(PATHS), 20))   # warm-up, untimed
            for rep in range(args.repeats):
                k = rep % len(PATHS)
                blocks.append((readers, rows, list(PATHS[k:] + PATHS[:k]), args.messages))
    return blocks


class Links:
    """Rank ``rank``'s ends of the three paths in a group of ``world`` ranks."""

    def __init__(self, rank: int, world: int, port: int, tag: str):
        import torch.distributed as dist

        from anydev.core.executors.shm_queue import MessageQueue

        self.rank = rank
        store = dist.PrefixStore(f"{tag}/", dist.TCPStore("127.0.0.1", port, is_master=False,
                                                          timeout=timedelta(seconds=120)))
        self.pg = dist.ProcessGroupGloo(store, rank, world, timedelta(seconds=120))
        if rank == 0:
            self.queue = MessageQueue.create(list(range(1, world)))
            store.set("queue", self.queue.name)
            self.queue.wait_for_readers(120)
            self.queue.unlink()
        else:
            store.wait(["queue"])
            self.queue = MessageQueue.attach(store.get("queue").decode(), rank - 1, rank)

    def broadcast(self, payload: bytes | None) -> bytearray:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        size = torch.tensor([len(payload) if payload is not None else 0], dtype=torch.int64)
        self.pg.broadcast([size], opts).wait()
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload is not None else \
            torch.empty(int(size.item()), dtype=torch.uint8)
        self.pg.broadcast([data], opts).wait()
        return bytearray(data.numpy().tobytes())

    def send(self, path: str, message: tuple) -> None:
        from anydev.core.executors.step_message import dumps, encode

        if path == "gloo+pickle":
            self.broadcast(dumps(message))
        elif path == "gloo":
            self.broadcast(b"".join(encode(message)))
        else:
            self.queue.put(encode(message), timeout_s=60)

    def receive(self, path: str):
        from anydev.core.executors.step_message import decode

        if path == "gloo+pickle":
            return pickle.loads(self.broadcast(None))
        if path == "gloo":
            return decode(self.broadcast(None))
        return decode(self.queue.get(timeout_s=120))

    def close(self) -> None:
        self.queue.close()


def reader(rank: int, world: int, port: int, tag: str, plan, acks) -> None:
    torch.set_num_threads(1)
    links = Links(rank, world, port, tag)
    count = 0
    for readers, rows, paths, messages in plan:
        for path in paths:
            for _ in range(messages):
                message = links.receive(path)
                if message[5][0].B != rows:
                    raise RuntimeError(f"reader {rank} got a batch of {message[5][0].B} rows, sent {rows}")
                count += 1
                acks[rank - 1] = count
    links.close()


def run(args) -> int:
    import torch.distributed as dist

    torch.set_num_threads(1)
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120))
    spawn = multiprocessing.get_context("spawn")
    plan = schedule(args)
    results = {}
    for readers in [int(n) for n in args.readers.split(",")]:
        mine = [b for b in plan if b[0] == readers]
        acks = spawn.RawArray("q", readers)
        tag = f"readers{readers}"
        procs = [spawn.Process(target=reader, args=(r, readers + 1, server.port, tag, mine, acks), daemon=True)
                 for r in range(1, readers + 1)]
        for proc in procs:
            proc.start()
        links = Links(0, readers + 1, server.port, tag)
        count, timed = 0, {}
        for first, (_, rows, paths, messages) in enumerate(mine):
            warm_up = first == 0 or mine[first - 1][1] != rows
            message = step_message(0, rows, args.blocks)
            for path in paths:
                start = time.perf_counter()
                for _ in range(messages):
                    links.send(path, message)
                    count += 1
                    while min(acks) < count:
                        os.sched_yield()
                elapsed = time.perf_counter() - start
                if not warm_up:
                    timed.setdefault((rows, path), []).append(elapsed / messages * 1e6)
        for proc in procs:
            proc.join(60)
        links.close()
        from anydev.core.executors.step_message import encode

        for rows in sorted({r for r, _ in timed}):
            size = sum(memoryview(p).nbytes for p in encode(step_message(0, rows, args.blocks)))
            us = {path: statistics.median(timed[(rows, path)]) for path in PATHS}
            results[f"{readers}x{rows}"] = dict(readers=readers, rows=rows, message_bytes=size, us=us,
                                               gloo_pickle_over_queue=us["gloo+pickle"] / us["queue"],
                                               gloo_over_queue=us["gloo"] / us["queue"])
            print(_row(results[f"{readers}x{rows}"]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                           machine=_machine(), command=" ".join(map(shlex.quote, ["python", *sys.argv])),
                           results=results), f, indent=2)
    return 0


def _row(r: dict) -> str:
    us = r["us"]
    return (f"readers {r['readers']}, batch {r['rows']:>3} ({r['message_bytes']:>6} B): "
            + ", ".join(f"{p} {us[p]:8.1f} µs" for p in PATHS)
            + f"   gloo+pickle/queue {r['gloo_pickle_over_queue']:.2f}x, gloo/queue {r['gloo_over_queue']:.2f}x")


def _machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.node()}: {model or platform.processor()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"


def main(argv=None) -> int:
    args = parse_args(argv)
    print(f"{_machine()}\none decode step's message, rank 0 to N readers; median µs per message over {args.repeats} "
          f"repetitions of {args.messages}", flush=True)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
