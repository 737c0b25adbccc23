"""How fast a checkpoint file's bytes reach host buffers from a warm page cache, by read method and
thread count, side by side in one run: what bounds the weight loaders' reading (GGUF and safetensors
slices copy out of a read-only memory map).

    python benchmarks/read_bench.py /tmp/llama-8b-q4_k.gguf                  # threads 1,2,4,8,16
    python benchmarks/read_bench.py FILE --threads 8 --chunk-mib 4 --out read.json

Methods: "mmap" copies out of a fresh read-only memory map (its page faults included, as a loader's
first touch pays them); "mmap+populate" asks the kernel to map the whole file first
(``MADV_POPULATE_READ``, Linux 5.14+; the time of that call included); "pread" reads with
``os.preadv`` straight into the buffers (no mapping). Each of ``threads`` threads copies its own
contiguous part of the file, ``--chunk-mib`` at a time, into a buffer of its own (touched before the
clock starts, as a pinned staging buffer is). GB/s is the file's bytes over the wall time; each cell is
the best of ``--repeat``; the ratios are over "mmap" at the same thread count.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)   # the Linux value; Python < 3.13 lacks the name
METHODS = ("mmap", "mmap+populate", "pread")


def read_once(path: str, method: str, threads: int, chunk: int, buffers: list[np.ndarray]) -> float:
    """Seconds for ``threads`` threads to copy the whole file by ``method``."""
    size = os.path.getsize(path)
    bounds = [size * i // threads for i in range(threads + 1)]
    with open(path, "rb") as f:
        start = time.perf_counter()
        if method == "pread":
            source = None
        else:
            mapping = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            if method == "mmap+populate":
                mapping.madvise(MADV_POPULATE_READ)
            source = np.frombuffer(mapping, dtype=np.uint8)

        def part(i: int) -> None:
            out = buffers[i]
            for at in range(bounds[i], bounds[i + 1], chunk):
                n = min(chunk, bounds[i + 1] - at)
                if source is None:
                    if os.preadv(f.fileno(), [memoryview(out)[:n]], at) != n:
                        raise OSError(f"{path}: a short read at byte {at}")
                else:
                    np.copyto(out[:n], source[at:at + n])

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(part, range(threads)))
        seconds = time.perf_counter() - start
        if source is not None:
            del source
            mapping.close()
    return seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 2, 4, 8, 16])
    p.add_argument("--methods", type=lambda s: s.split(","), default=list(METHODS))
    p.add_argument("--chunk-mib", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    size, chunk = os.path.getsize(args.file), args.chunk_mib << 20
    read_once(args.file, "pread", 4, chunk, [np.ones(chunk, np.uint8) for _ in range(4)])   # warm the page cache
    print(f"{args.file}: {size / 1e9:.2f} GB, chunks of {args.chunk_mib} MiB, best of {args.repeat}; GB/s (/ mmap)")
    print(f"{'threads':>7}  " + "  ".join(f"{m:>20}" for m in args.methods))
    rows = []
    for threads in args.threads:
        buffers = [np.ones(chunk, np.uint8) for _ in range(threads)]
        best = {}
        for _ in range(args.repeat):
            for method in args.methods:
                seconds = read_once(args.file, method, threads, chunk, buffers)
                best[method] = min(best.get(method, seconds), seconds)
        gbps = {m: size / s / 1e9 for m, s in best.items()}
        base = gbps.get("mmap")
        print(f"{threads:>7}  " + "  ".join(
            f"{gbps[m]:>11.1f}" + (f" ({gbps[m] / base:4.2f}x)" if base else "        ") for m in args.methods), flush=True)
        rows.append({"threads": threads, "gbps": gbps})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"file": args.file, "bytes": size, "chunk_mib": args.chunk_mib, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
