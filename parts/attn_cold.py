"""Session 33: decode attention's device time at batch 1 with its keys and values read from HBM.

In the 8B decode step a layer's attention takes 11.4 us (H100, PDL off), where `attn_sweep.py` timed
7.3 us: there each call reads the same 1 MB of cache, which stays in the L2, while in a step the
GEMVs' gigabytes have evicted it. Here each call of the captured graph reads a cache of its own,
`--cache-mb` megabytes of them in all (more than the L2), so every key and value comes from HBM as in a step.
Forced partitions, warps and keys a tile, as attn_sweep.py; "hot" rows time one cache for
comparison. The tree under test is whichever `anydev` imports (an after-tree's patch included).

    python parts/attn_cold.py --out attn-cold.json
    python parts/attn_cold.py --whole --out attn-whole.json   # the whole-sequence path's tiles and warps

`--whole` keeps the kernel's own partitions (a short sequence read whole by one program, as in a step)
and forces the warps, `WHOLE_BLOCK_N` (where the tree has it) and, at 64-wide heads, `WHOLE_KEYS_PER_DIM`.
"""
from __future__ import annotations

import argparse
import itertools
import json

import torch

from anydev.backends.triton_kernels import attention_decode as ad
from attn_sweep import graph_calls_us      # the script beside this one


def caches(count, context, kv, d, block_size, gen):
    pages = -(-context // block_size)
    shape = (pages, block_size, kv, d)
    ks = [torch.randn(shape, generator=gen).to(torch.bfloat16).cuda() for _ in range(count)]
    vs = [torch.randn(shape, generator=gen).to(torch.bfloat16).cuda() for _ in range(count)]
    tables = torch.randperm(pages, generator=gen).view(1, pages).to(torch.int32).cuda()
    lens = torch.tensor([context], dtype=torch.int32).cuda()
    return ks, vs, tables, lens


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--cache-mb", type=int, default=160, help="the caches' bytes in all (above the L2's 50-60 MB)")
    p.add_argument("--whole", action="store_true", help="sweep the whole-sequence path (see the docstring)")
    args = p.parse_args()
    if args.whole:
        return whole_sweep(args)
    gen = torch.Generator().manual_seed(0)
    auto_splits, auto_warps, auto_block, auto_whole = ad.num_splits, ad.decode_warps, ad.BLOCK_N, ad.WHOLE_KEYS_PER_DIM
    rows = []
    for d, context in ((128, 256), (128, 1024), (64, 256)):
        per_cache = 2 * context * 8 * d * 2
        count = max(8, args.cache_mb * 2 ** 20 // per_cache)
        ks, vs, tables, lens = caches(count, context, 8, d, 16, gen)
        q = torch.randn(1, 32, d, generator=gen).to(torch.bfloat16).cuda()
        want = ad.paged_decode_attention(q, ks[0], vs[0], tables, lens, d ** -0.5)
        chosen = auto_splits(1, 8, context, q.device)
        configs = [("auto", None, None, None)] + [
            (f"s{s} w{w} n{n}", s, w, n) for s, w, n in itertools.product((1, 2, 4, 8), (4, 8), (64, 128))
            if n * s <= max(context, 64 * s)]
        for name, splits, warps, block in configs:
            if splits is not None:
                ad.num_splits = lambda *a, s=splits: s
                ad.decode_warps = lambda *a, w=warps: w
                ad.BLOCK_N = block
                ad.WHOLE_KEYS_PER_DIM = 0           # forced partitions hold keys even in a short context
            try:
                got = ad.paged_decode_attention(q, ks[0], vs[0], tables, lens, d ** -0.5)
                err = (got.float() - want.float()).abs().max().item()
                cold = graph_calls_us([lambda i=i: ad.paged_decode_attention(q, ks[i], vs[i], tables, lens, d ** -0.5)
                                      for i in range(count)])
                hot = graph_calls_us([lambda: ad.paged_decode_attention(q, ks[0], vs[0], tables, lens, d ** -0.5)] * 64)
            finally:
                ad.num_splits, ad.decode_warps, ad.BLOCK_N = auto_splits, auto_warps, auto_block
                ad.WHOLE_KEYS_PER_DIM = auto_whole
            rows.append(dict(d=d, context=context, config=name, cold_us=round(cold, 2), hot_us=round(hot, 2),
                             err=err, caches=count, auto_splits=chosen))
            print(f"d {d:4d} context {context:5d} {name:14s} cold {cold:6.2f} us  hot {hot:6.2f} us  "
                  f"(max|diff| {err:.1e}; {count} caches; auto {chosen} partitions)", flush=True)
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


def whole_sweep(args):
    """Rows of the whole-sequence path: (head dim, context, keys-per-dim limit) x warps x tile keys."""
    gen = torch.Generator().manual_seed(0)
    saved = {name: getattr(ad, name) for name in ("decode_warps", "WHOLE_BLOCK_N", "WHOLE_KEYS_PER_DIM")
             if hasattr(ad, name)}
    tiles = (64, 128, 256) if hasattr(ad, "WHOLE_BLOCK_N") else (None,)
    rows = []
    for d, context, limit in ((128, 256, 3), (128, 384, 3), (64, 192, 3), (64, 256, 3), (64, 256, 4), (64, 384, 6)):
        count = max(8, args.cache_mb * 2 ** 20 // (2 * context * 8 * d * 2))
        ks, vs, tables, lens = caches(count, context, 8, d, 16, gen)
        q = torch.randn(1, 32, d, generator=gen).to(torch.bfloat16).cuda()
        want = ad.paged_decode_attention(q, ks[0], vs[0], tables, lens, d ** -0.5)
        for warps, tile in itertools.product((4, 8, 16), tiles):
            ad.decode_warps = lambda *a, w=warps: w
            ad.WHOLE_KEYS_PER_DIM = limit
            if tile is not None:
                ad.WHOLE_BLOCK_N = tile
            try:
                got = ad.paged_decode_attention(q, ks[0], vs[0], tables, lens, d ** -0.5)
                err = (got.float() - want.float()).abs().max().item()
                cold = graph_calls_us([lambda i=i: ad.paged_decode_attention(q, ks[i], vs[i], tables, lens, d ** -0.5)
                                      for i in range(count)])
            finally:
                for name, value in saved.items():
                    setattr(ad, name, value)
            rows.append(dict(d=d, context=context, keys_per_dim=limit, warps=warps, whole_block_n=tile,
                             cold_us=round(cold, 2), err=err))
            print(f"d {d:4d} context {context:5d} whole below {limit * d:4d} keys  warps {warps:2d} tile {tile}: "
                  f"cold {cold:6.2f} us  (max|diff| {err:.1e})", flush=True)
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
