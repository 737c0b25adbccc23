"""Session 28: the greedy argmax at batch 1 (torch's max over a row, one thread block: 42 us a step for
a 128K vocabulary on an H100, session 27) against core.sched.sampling.row_max's two passes, each timed
in a CUDA graph of 200 calls (device time only), with their indices compared.

    python parts/row_max_bench.py --out row_max.json
"""
from __future__ import annotations

import argparse
import json

import torch

from anydev.core.sched.sampling import row_max
from attn_sweep import graph_time_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for width in (32000, 128256, 151936):
        for batch in (1, 4, 16):
            logits = torch.randn(batch, width, generator=gen).to(torch.bfloat16).cuda()
            same = torch.equal(row_max(logits)[1], logits.max(dim=-1)[1])
            torch_us = graph_time_us(lambda: logits.max(dim=-1))
            split_us = graph_time_us(lambda: row_max(logits))
            rows.append(dict(width=width, batch=batch, torch_us=round(torch_us, 2), row_max_us=round(split_us, 2),
                             same_indices=same))
            print(f"vocab {width:6d} batch {batch:2d}: torch max {torch_us:6.2f} us, row_max {split_us:6.2f} us "
                  f"({torch_us / split_us:.2f}x), same indices: {same}", flush=True)
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
