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
``--iters`` calls after a warm-up, the device synchronised around each run (kernel_bench's timer):
at decode sizes that is the host's launch cost, not the kernel's. On a CUDA-like device ``graph us``
is the kernel's own: ``--iters`` calls captured in one device graph, each on other experts (so the
weights come from HBM, not L2), replayed ``--reps`` times; ``GB/s`` is then over that time.

``--plans legacy,chosen`` adds, for moe_linear's few-rows GEMV, a graph-timed row per named plan
(:mod:`anydev.backends.triton_kernels.moe_plans`: the first path's and the one it picks now);
``--sweep`` times candidate plans of the GEMV and prints the best (``--table-out``: as
``moe_plans.RECORDED`` lines).
"""
from __future__ import annotations

import argparse
import itertools
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
    p.add_argument("--plans", default="", help="GEMV plans to time by name, of legacy,chosen")
    p.add_argument("--sweep", action="store_true", help="time candidate GEMV plans (few rows) and print the best")
    p.add_argument("--table-out", help="write the sweep's best plans here, as moe_plans.RECORDED lines")
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args(argv)
    if args.tiny:
        args.experts, args.top_k, args.hidden, args.width = 8, 2, 256, 64
    return args


def random_experts(batch: int, experts: int, top_k: int, gen: torch.Generator) -> torch.Tensor:
    """[batch * top_k] int64: each token's top_k distinct experts, at random."""
    return torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(batch)]).reshape(-1)


def graph_us(dev, calls, reps: int) -> float | None:
    """Microseconds per call of ``calls`` captured in one device graph and replayed ``reps`` times
    (None off CUDA-like devices: no graphs there)."""
    if dev.type != "cuda":
        return None
    for call in calls:          # compiled and warm before the capture
        call()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (reps * len(calls))


def gemv_candidates(K: int):
    """The few-rows GEMV plans a sweep tries (float weights): outputs, inputs a step, warps, K split."""
    from anydev.backends.triton_kernels.linear import Plan

    for bn, bk, warps, split in itertools.product((16, 32, 64), (128, 256, 512), (4, 8), (1, 2)):
        if bk <= K and K // bk >= split:
            yield Plan.sliced(1, K, 1, bn, bk, split, warps)


def named_plans(names: str, R: int, N: int, K: int, dev):
    from anydev.backends.triton_kernels import moe_plans

    plans = {"legacy": lambda: moe_plans.legacy(N, K, "dense"), "chosen": lambda: moe_plans.gemv_plan(R, N, K, "dense", dev)}
    for name in filter(None, names.split(",")):
        if name not in plans:
            raise SystemExit(f"--plans: unknown plan {name!r}, of {', '.join(plans)}")
        yield name, plans[name]()


def main(argv=None) -> int:
    args = parse_args(argv)
    backend, dev, kernels = open_kernels(args.device)
    missing = [name for name in ("moe_route", "moe_linear") if name not in kernels.native]
    if missing:
        print(f"'{backend.name}' offers no native {', '.join(missing)}: nothing to compare", file=sys.stderr)
        return 1
    if (args.plans or args.sweep) and dev.type != "cuda":
        print("--plans and --sweep time device graphs: a CUDA-like device only", file=sys.stderr)
        return 1
    dtype = getattr(torch, args.dtype)
    timer = Timer(dev, args.iters, args.reps)
    gen = torch.Generator().manual_seed(0)
    E, k, H, width = args.experts, args.top_k, args.hidden, args.width // args.tp
    stacks = {"gate_up": (torch.randn(E, 2 * width, H, generator=gen) / H ** 0.5).to(dtype).to(dev),
              "down": (torch.randn(E, H, width, generator=gen) / width ** 0.5).to(dtype).to(dev)}
    print(f"experts {E}, top {k}, hidden {H}, expert width {args.width} / tp {args.tp}, {args.dtype}")
    print(f"{'kernel':10} {'case':26} {'native us':>10} {'graph us':>9} {'reference us':>13} {'ratio':>7} "
          f"{'GB/s':>8}  {'max|diff|':>9}")
    rows, table = [], {}
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
            # other experts each captured call (as many id sets as calls), so a replay reads HBM, not L2
            id_sets = [random_experts(batch, E, k, gen).to(dev) for _ in range(args.iters)]
            for name, case, call_args, bytes_read in cases:
                native_fn, ref_fn = getattr(kernels, name), reference.REFERENCES[name]
                got, want = native_fn(*call_args), ref_fn(*call_args)
                got, want = (got[0], want[0]) if name == "moe_route" else (got, want)
                diff = (got.float() - want.float()).abs().max().item()
                t_native, t_ref = timer(lambda: native_fn(*call_args)), timer(lambda: ref_fn(*call_args))
                calls = [lambda ids=ids: native_fn(*call_args[:-1], ids) for ids in id_sets] \
                    if name == "moe_linear" else [lambda: native_fn(*call_args)]
                t_graph = graph_us(dev, calls, args.reps)
                t_kernel = t_graph or t_native
                gbps = bytes_read / 1e9 / (t_kernel / 1e6) if bytes_read else 0.0
                rows.append(dict(kernel=name, case=case, dtype=args.dtype, native_us=t_native, graph_us=t_graph,
                                 reference_us=t_ref, reference_ratio=t_ref / t_native, gbps=gbps, bytes=bytes_read,
                                 max_abs_diff=diff))
                print(f"{name:10} {case:26} {t_native:>10.1f} {t_graph or 0:>9.1f} {t_ref:>13.1f} "
                      f"{t_ref / t_native:>7.2f} {gbps:>8.1f}  {diff:>9.2e}", flush=True)
                if name == "moe_linear" and (args.plans or args.sweep):
                    plan_rows(args, dev, case, call_args, id_sets, bytes_read, want, rows, table)
    if args.table_out:
        write_table(args.table_out, table)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=args.device, kernels=kernels.describe(), experts=E, top_k=k, hidden=H,
                           width=args.width, tp=args.tp, rows=rows), f, indent=2)
        print(f"wrote {args.out}")
    return 0


def plan_rows(args, dev, case, call_args, id_sets, bytes_read, want, rows, table) -> None:
    """The graph-timed rows of ``--plans`` and, with ``--sweep``, the best candidate (into ``table``
    where it beats the chosen plan by more than 3%)."""
    from anydev.backends.triton_kernels import moe, moe_plans
    from anydev.backends.triton_kernels.linear_plans import device_name

    x, weight = call_args[0], call_args[1]
    R, K = x.shape
    N = weight.shape[1]
    if R > moe.GEMV_MAX_ROWS:
        return

    def timed(p):
        return graph_us(dev, [lambda ids=ids: moe.gemv(x, weight, None, "dense", ids, p) for ids in id_sets], args.reps)

    for name, p in named_plans(args.plans, R, N, K, dev):
        us = timed(p)
        rows.append(dict(kernel="moe_linear", case=case, plan=name, plan_str=str(p), graph_us=us,
                         gbps=bytes_read / 1e3 / us))
        print(f"  plan {name:7} {us:8.1f} us {bytes_read / 1e3 / us:8.1f} GB/s  {p}", flush=True)
    if not args.sweep:
        return
    chosen = moe_plans.gemv_plan(R, N, K, "dense", dev)
    results, wrong = {chosen: timed(chosen)}, 0
    for p in gemv_candidates(K):
        if p in results:
            continue
        got = moe.gemv(x, weight, None, "dense", call_args[-1], p).float()
        if not torch.allclose(got, want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item()):
            wrong += 1
            continue
        results[p] = timed(p)
    best = min(results, key=results.get)
    print(f"  sweep: chosen {results[chosen]:.1f} us, best {results[best]:.1f} us "
          f"({bytes_read / 1e3 / results[best]:.1f} GB/s) {best}" + (f"  [{wrong} plans gave other outputs]" if wrong else ""),
          flush=True)
    rows.append(dict(kernel="moe_linear", case=case, plan="sweep best", plan_str=str(best), graph_us=results[best],
                     chosen_us=results[chosen], wrong_plans=wrong))
    bucket = moe_plans.rows_bucket(R)
    if results[chosen] / results[best] > 1.03 and bucket == R:
        table[(device_name(dev), R, "dense", N, K)] = (best.block_n, best.block_k, best.split, best.num_warps,
                                                       best.num_stages)


def write_table(path: str, table: dict) -> None:
    with open(path, "w") as f:
        for key, value in sorted(table.items()):
            f.write(f"    {key!r}: {value!r},\n")
    print(f"wrote {len(table)} plan(s) that beat the chosen one to {path} (paste into moe_plans.RECORDED)")


if __name__ == "__main__":
    raise SystemExit(main())
