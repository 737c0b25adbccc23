"""The sampler's greedy reduction side by side: ``torch.max(dim=-1)`` against
:func:`anydev.core.sched.sampling.row_max` (two stages up to 16 rows) on the logits of a decode step.

    python benchmarks/row_max_bench.py --device nvidia

Device time per call, measured with events over ``--reps`` back-to-back calls (eager, as the sampler runs
them), and the host's time to launch them; prints both and the ratio, per rows and vocabulary.
"""
from __future__ import annotations

import argparse
import time

import torch

from anydev.core.sched.sampling import row_max
from kernel_bench import open_kernels   # the script beside this one


def timed(module, call, reps: int) -> tuple[float, float]:
    """(device us, host us) per call of ``call``."""
    for _ in range(3):
        call()
    module.synchronize()
    start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
    host = time.perf_counter()
    start.record()
    for _ in range(reps):
        call()
    end.record()
    host = time.perf_counter() - host
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps, host * 1e6 / reps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="nvidia")
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args(argv)
    _, dev, _ = open_kernels(args.device)
    if dev.type == "cpu":
        raise SystemExit("row_max_bench times device kernels with events: run it on a GPU backend (--device nvidia)")
    module = getattr(torch, dev.type)
    print(f"{'rows':>4} {'vocab':>7} {'torch.max us':>13} {'row_max us':>11} {'ratio':>6} {'host torch / row_max us':>24}")
    for vocab in (128256, 151936):
        for rows in (1, 4, 16):
            logits = torch.randn(rows, vocab, device=dev).bfloat16()
            plain_dev, plain_host = timed(module, lambda: logits.max(dim=-1), args.reps)
            two_dev, two_host = timed(module, lambda: row_max(logits), args.reps)
            if not torch.equal(row_max(logits)[1], logits.max(dim=-1)[1]):
                raise SystemExit(f"row_max chose other tokens than torch.max at {rows} x {vocab}")
            print(f"{rows:>4} {vocab:>7} {plain_dev:>13.1f} {two_dev:>11.1f} {plain_dev / two_dev:>5.2f}x "
                  f"{plain_host:>11.1f} / {two_host:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
