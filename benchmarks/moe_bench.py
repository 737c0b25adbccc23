"""The MoE kernels (contract 1.7) of a backend beside their torch references, at the Qwen3-30B-A3B
expert shape, in one run on one device; prints times, ratios and the rate at which moe_linear reads
the active experts' weights.

    python benchmarks/moe_bench.py --device nvidia --out results/moe.json      # bf16, 128 experts, top 8
    TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1 python benchmarks/moe_bench.py --device cpu --tiny   # smoke run

Cases, per batch size (--batch-sizes, default 1 and 32): ``moe_route`` of the batch's router logits
[batch, experts]; ``moe_linear`` of the batch's ``batch x top_k`` rows through the gate/up stack
[experts, 2 x width / tp, hidden] and the down stack [experts, hidden, width / tp] (--tp: the experts'
split under tensor parallelism), each token's experts drawn at random (distinct). ``ratio`` =
reference time / native time (> 1: the native kernel is faster); ``GB/s``: the distinct experts'
weight bytes (and the rows) over the native time (HBM bandwidth is the bound at decode);
``max|diff|`` is native vs reference, a sanity check. Times are medians of ``--reps`` runs of
``--iters`` calls after a warm-up, the device synchronised around each run (kernel_bench's timer).
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from anydev.plugin_api import kernels as reference

from kernel_bench import Timer, open_kernels


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="nvidia")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--width", type=int, default=768, help="an expert's intermediate size")
    p.add_argument("--tp", type=int, default=1, help="the experts' split (each rank: width / tp)")
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tiny", action="store_true", help="8 experts, top 2, hidden 256, width 64 (a smoke run)")
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args(argv)
    if args.tiny:
        args.experts, args.top_k, args.hidden, args.width = 8, 2, 256, 64
    return args


def random_experts(batch: int, experts: int, top_k: int, gen: torch.Generator) -> torch.Tensor:
    """[batch * top_k] int64: each token's top_k distinct experts, at random."""
    return torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(batch)]).reshape(-1)


def main(argv=None) -> int:
    args = parse_args(argv)
    backend, dev, kernels = open_kernels(args.device)
    missing = [name for name in ("moe_route", "moe_linear") if name not in kernels.native]
    if missing:
        print(f"'{backend.name}' offers no native {', '.join(missing)}: nothing to compare", file=sys.stderr)
        return 1
    dtype = getattr(torch, args.dtype)
    timer = Timer(dev, args.iters, args.reps)
    gen = torch.Generator().manual_seed(0)
    E, k, H, width = args.experts, args.top_k, args.hidden, args.width // args.tp
    stacks = {"gate_up": (torch.randn(E, 2 * width, H, generator=gen) / H ** 0.5).to(dtype).to(dev),
              "down": (torch.randn(E, H, width, generator=gen) / width ** 0.5).to(dtype).to(dev)}
    print(f"experts {E}, top {k}, hidden {H}, expert width {args.width} / tp {args.tp}, {args.dtype}")
    print(f"{'kernel':10} {'case':26} {'native us':>10} {'reference us':>13} {'ratio':>7} {'GB/s':>8}  {'max|diff|':>9}")
    rows = []
    with torch.inference_mode():
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            logits = torch.randn(batch, E, generator=gen).to(dtype).to(dev)
            cases = [("moe_route", f"batch {batch}", (logits, k, True), 0)]
            ids = random_experts(batch, E, k, gen).to(dev)
            distinct = len(set(ids.tolist()))
            for stack, weight in stacks.items():
                x = torch.randn(batch * k, weight.shape[2], generator=gen).to(dtype).to(dev)
                bytes_read = distinct * weight[0].nbytes + x.nbytes
                cases.append(("moe_linear", f"{stack} batch {batch} ({distinct} experts)",
                              (x, weight, None, None, ids), bytes_read))
            for name, case, call_args, bytes_read in cases:
                native_fn, ref_fn = getattr(kernels, name), reference.REFERENCES[name]
                got, want = native_fn(*call_args), ref_fn(*call_args)
                got, want = (got[0], want[0]) if name == "moe_route" else (got, want)
                diff = (got.float() - want.float()).abs().max().item()
                t_native, t_ref = timer(lambda: native_fn(*call_args)), timer(lambda: ref_fn(*call_args))
                gbps = bytes_read / 1e9 / (t_native / 1e6) if bytes_read else 0.0
                rows.append(dict(kernel=name, case=case, dtype=args.dtype, native_us=t_native, reference_us=t_ref,
                                 reference_ratio=t_ref / t_native, gbps=gbps, bytes=bytes_read, max_abs_diff=diff))
                print(f"{name:10} {case:26} {t_native:>10.1f} {t_ref:>13.1f} {t_ref / t_native:>7.2f} "
                      f"{gbps:>8.1f}  {diff:>9.2e}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=args.device, kernels=kernels.describe(), experts=E, top_k=k, hidden=H,
                           width=args.width, tp=args.tp, rows=rows), f, indent=2)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
