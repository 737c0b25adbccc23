"""Session 28: decode attention's device time at batch 1 against its partition count and warps.

Decode attention takes 11 us a layer at the 8B shape on an H100 (session 27, PDL off), 6.4 us at the
1B's 64-wide heads. This times the kernel alone, captured 200 times in one CUDA graph (no host time),
with the split count, warps and keys a tile forced (the module's own choice is printed as "auto"), for
both head widths, contexts 256 / 1024 / 4096 and a block table as wide as the context or 4096 tokens
wide.

    python parts/attn_sweep.py --out attn.json
"""
from __future__ import annotations

import argparse
import itertools
import json

import torch

from anydev.backends.triton_kernels import attention_decode as ad


def paged(context, table_tokens, kv, d, block_size, gen):
    pages = -(-table_tokens // block_size)
    k = torch.randn(pages, block_size, kv, d, generator=gen).to(torch.bfloat16).cuda()
    v = torch.randn(pages, block_size, kv, d, generator=gen).to(torch.bfloat16).cuda()
    tables = torch.randperm(pages, generator=gen).view(1, pages).to(torch.int32).cuda()
    lens = torch.tensor([context], dtype=torch.int32).cuda()
    return k, v, tables, lens


def graph_time_us(fn, calls=200, reps=5):
    """Median over ``reps`` replays of one graph of ``calls`` calls of ``fn``, us a call."""
    return graph_calls_us([fn] * calls, reps)


def graph_calls_us(calls, reps=5):
    """Median over ``reps`` replays of one graph of every callable in ``calls`` (the first three run
    once before capture), us a call."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for fn in calls[:3]:
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for fn in calls:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / len(calls))
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    gen = torch.Generator().manual_seed(0)
    auto_splits, auto_warps, auto_block = ad.num_splits, ad.decode_warps, ad.BLOCK_N
    rows = []
    for d in (64, 128):
        for context, table in ((256, 256), (256, 4096), (1024, 1024), (4096, 4096)):
            k, v, tables, lens = paged(context, table, 8, d, 16, gen)
            q = torch.randn(1, 32, d, generator=gen).to(torch.bfloat16).cuda()
            want = ad.paged_decode_attention(q, k, v, tables, lens, d ** -0.5)
            chosen = auto_splits(1, 8, table, q.device)
            for splits, warps, block in itertools.product((1, 4, 8, 16), (4, 8), (32, 64)):
                ad.num_splits = lambda *a, s=splits: s
                ad.decode_warps = lambda *a, w=warps: w
                ad.BLOCK_N = block
                try:
                    got = ad.paged_decode_attention(q, k, v, tables, lens, d ** -0.5)
                    err = (got.float() - want.float()).abs().max().item()
                    us = graph_time_us(lambda: ad.paged_decode_attention(q, k, v, tables, lens, d ** -0.5))
                finally:
                    ad.num_splits, ad.decode_warps, ad.BLOCK_N = auto_splits, auto_warps, auto_block
                auto = (splits == chosen and warps == auto_warps(8 * splits, splits, q.device)
                        and block == auto_block)
                rows.append(dict(d=d, context=context, table=table, splits=splits, warps=warps, block_n=block,
                                 us=round(us, 2), err=err, auto=auto))
                print(f"d {d:4d} context {context:5d} table {table:5d} splits {splits:2d} warps {warps} "
                      f"block_n {block}: {us:7.2f} us{'  auto' if auto else ''}  (max|diff| {err:.1e})", flush=True)
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
