"""Decode GEMMs side by side in one run: each projection of the 1B and 8B Llama shapes at batch 1 (and
32), as torch's matmul on bf16 weights (cuBLAS on nvidia), the backend's ``linear`` on the same bf16
weights, and its ``quantized_linear`` in every weight format; prints microseconds and the achieved
bandwidth (weight bytes + activations over the time), and per model the GEMMs' time per token.

    python benchmarks/linear_bench.py --device nvidia                         # the table
    python benchmarks/linear_bench.py --device nvidia --sweep --out sweep.json  # plus a plan sweep
    python benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --float-gemv  # GGUF int dots vs float
    python benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 32 \\
        --sweep-formats int8 --table-out plans.txt                              # batch-32 tl.dot tiles
    TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1 python benchmarks/linear_bench.py --device cpu --tiny

Times: a device graph of one call per copy of the weights (as many copies as it takes to exceed 256 MB,
so the L2 cache does not serve the weights), replayed ``--reps`` times; per call. On the cpu (no graphs),
wall time of the same calls. ``--sweep`` times the Triton kernel's candidate plans (blocks, warps,
pipeline stages, K split) for the GEMMs of a few formats at ``--sweep-batches`` rows and prints the best
beside the heuristic's (``anydev.backends.triton_kernels.linear.plan``); ``--table-out`` writes those
that beat it as entries of ``anydev.backends.triton_kernels.linear_plans.RECORDED``, which ``plan``
then takes on that device.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time

import torch
import torch.nn.functional as F

from anydev.plugin_api.weight_formats import (BLOCK_FORMATS, CHANNEL_FORMATS, SPLIT_FORMATS, WEIGHT_FORMATS,
                                             quantize_per_channel, row_bytes, split_rows)
from kernel_bench import open_kernels   # the script beside this one

MODELS = {  # Llama-3.2-1B and Llama-3-8B: hidden, query heads, KV heads, head dim, MLP, vocabulary, layers
    "1B": (2048, 32, 8, 64, 8192, 128256, 16),
    "8B": (4096, 32, 8, 128, 14336, 128256, 32),
}
TINY = {"tiny": (256, 4, 2, 64, 512, 1024, 2)}
#: Float16 fields of each GGUF block (byte offsets), filled with small values in random blocks.
F16_FIELDS = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q4_k": (0, 2), "q6_k": (208,)}
BYTES_PAST_L2 = 256 << 20


def gemms(model) -> list[tuple[str, int, int]]:
    """(name, N, K) of one layer's projections and the lm_head."""
    hidden, heads, kv, d, mlp, vocab, _ = model
    return [("qkv", (heads + 2 * kv) * d, hidden), ("o", hidden, heads * d), ("gate_up", 2 * mlp, hidden),
            ("down", hidden, mlp), ("lm_head", vocab, hidden)]


def make_weight(fmt: str, N: int, K: int, dev) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A random weight: bf16 (``dense``), per-channel quantized, or GGUF blocks of random bytes with
    small float16 scales (a split-row format: those blocks' rows split)."""
    if fmt == "dense":
        return (torch.randn(N, K, device=dev) / K ** 0.5).bfloat16(), None
    if fmt in CHANNEL_FORMATS:
        return quantize_per_channel(torch.randn(N, K, device=dev), fmt)
    if fmt in SPLIT_FORMATS:
        return split_rows(make_weight(SPLIT_FORMATS[fmt], N, K, dev)[0], fmt, K), None
    block = BLOCK_FORMATS[fmt]
    blocks = torch.randint(0, 256, (N, K // block.elems, block.bytes), dtype=torch.uint8, device=dev)
    for at in F16_FIELDS[fmt]:
        value = (0.002 + 0.01 * torch.rand(blocks.shape[:2], device=dev)).half()
        blocks[:, :, at:at + 2] = value.view(torch.uint8).view(*value.shape, 2)
    return blocks.view(N, -1), None


def weight_bytes(fmt: str, N: int, K: int) -> int:
    return N * (2 * K if fmt == "dense" else row_bytes(fmt, K) + (4 if fmt in CHANNEL_FORMATS else 0))


class Timer:
    def __init__(self, dev, reps: int):
        self.dev, self.reps = dev, reps

    def __call__(self, calls) -> float:
        """Microseconds per call of ``calls`` (one callable per weight copy)."""
        for call in calls:
            call()
        if self.dev.type == "cpu":
            start = time.perf_counter()
            for _ in range(self.reps):
                for call in calls:
                    call()
            return (time.perf_counter() - start) / (self.reps * len(calls)) * 1e6
        module = getattr(torch, self.dev.type)
        side = module.Stream()
        side.wait_stream(module.current_stream())
        with module.stream(side):
            for call in calls:
                call()
        module.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for call in calls:
                call()
        graph.replay()
        start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
        start.record()
        for _ in range(self.reps):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / (self.reps * len(calls))


def copies_of(fmt, N, K, dev, tiny):
    count = 1 if tiny else max(1, min(16, -(-BYTES_PAST_L2 // weight_bytes(fmt, N, K))))
    return [make_weight(fmt, N, K, dev) for _ in range(count)]


def methods(kernels, formats, float_gemv=False):
    """(column name, format, call(x, weight, scales)) of ``formats`` ("dense": torch's and the backend's);
    with ``float_gemv`` also "FMT float" beside each GGUF format: the Triton kernel's plan without the
    integer dots (its float GEMV at batch 1), the before of an integer-dot plan in the same run."""
    if "dense" in formats:
        yield "torch bf16", "dense", lambda x, w, s: F.linear(x, w)
        yield "anydev bf16", "dense", lambda x, w, s: kernels.linear(x, w)
    for fmt in WEIGHT_FORMATS:
        if fmt in formats:
            yield fmt, fmt, lambda x, w, s, fmt=fmt: kernels.quantized_linear(x, w, s, fmt)
            if float_gemv and fmt in BLOCK_FORMATS:
                yield f"{fmt} float", fmt, lambda x, w, s, fmt=fmt: float_plan_call(x, w, s, fmt)
            if float_gemv and fmt in ("q8_0", "q4_0", "q4_1"):
                yield f"{fmt} words", fmt, lambda x, w, s, fmt=fmt: word_plan_call(x, w, s, fmt)


def float_plan_call(x, weight, scales, fmt):
    """The Triton kernel on ``fmt`` with the plan it takes for activations other than bfloat16 (no
    integer dots)."""
    from anydev.backends.triton_kernels import linear as triton_linear

    M, K = x.shape
    return triton_linear.run(x, weight, scales, fmt, triton_linear.plan(M, weight.shape[0], K, fmt, x.device))


def word_plan_call(x, weight, scales, fmt):
    """The Triton kernel on ``fmt`` with its integer-dot plan's steps reading a block's words one a load
    (``int_chunks`` off: the step before the aligned chunks), 64 outputs a program as that step's heuristic."""
    from anydev.backends.triton_kernels import linear as triton_linear

    M, K = x.shape
    p = triton_linear.plan(M, weight.shape[0], K, fmt, x.device, x.dtype)
    p = triton_linear.Plan.sliced(M, K, 1, 64, p.block_k, p.split, p.num_warps, int_dot=p.int_dot)
    return triton_linear.run(x, weight, scales, fmt, p)


def table(args, kernels, dev, models) -> list[dict]:
    timer = Timer(dev, args.reps)
    rows = []
    for (model_name, model), batch in itertools.product(models.items(), args.batches):
        per_token = {}
        print(f"\n== {model_name}, batch {batch}: us per call (TB/s)")
        for name, N, K in gemms(model):
            x = torch.randn(batch, K, device=dev).bfloat16()
            cells = []
            for column, fmt, call in methods(kernels, args.formats, args.float_gemv and batch == 1):
                weights = copies_of(fmt, N, K, dev, args.tiny)
                us = timer([lambda w=w, s=s: call(x, w, s) for w, s in weights])
                moved = weight_bytes(fmt, N, K) + 2 * batch * (K + N)
                rows.append({"model": model_name, "batch": batch, "gemm": name, "N": N, "K": K, "method": column,
                             "us": us, "tb_per_s": moved / us / 1e6})
                layers = 1 if name == "lm_head" else model[-1]
                per_token[column] = per_token.get(column, 0.0) + us * layers
                cells.append(f"{column} {us:8.1f} ({moved / us / 1e6:4.2f})")
                del weights
            print(f"{name:8} {N:6}x{K:<6} " + " | ".join(cells), flush=True)
        print(f"GEMMs per token (ms) and the tok/s they bound: " + " | ".join(
            f"{column} {us / 1e3:.3f} ({1e6 / us * batch:,.0f})" for column, us in per_token.items()))
        for column, us in per_token.items():
            rows.append({"model": model_name, "batch": batch, "gemm": "per token", "method": column, "us": us,
                         "tokens_per_s_bound": 1e6 / us * batch})
    return rows


def candidates(M: int, K: int, fmt: str):
    """The plans a sweep tries for ``M`` rows. At batch 1: the GEMV's outputs, inputs, warps and K split
    (int8, fp8 and the split rows also 1,024 inputs a step, whose bytes equal bf16's 512 for int8; q4_k/q6_k one 256-value
    super-block a tile, so only that tile); the GGUF blocks' integer-dot GEMV 32 to 256 outputs over 256
    inputs (q6_k 512, a pair of super-blocks) on 1 to 8 warps, K split up to 8: 48 plans; the 32-value
    blocks' aligned chunks one or two steps a tile, one or two rows a thread: 40 plans. Above batch 1:
    the ``tl.dot`` tiles (the bucket's rows; 64 or 128 outputs, 128 or 256 inputs; q4_k/q6_k: 32 or 64
    outputs of a super-block), warps, pipeline stages and K split (up to 8: the small projections have
    too few tiles to fill the device unsplit), each tile of 64 or more outputs with the weights as the
    dot's first operand and as its second: 128 plans (48; q6_k_split 64), a few minutes a format on the 8B shape."""
    from anydev.backends.triton_kernels import linear as triton_linear

    if M == 1 and triton_linear.int_dots(fmt, torch.bfloat16, K):     # the integer-dot GEMV: wider programs
        chunks = triton_linear.int_chunks(fmt, K, 256)
        if chunks:      # a row's steps one thread's (rows >= threads, else no 16-byte loads), one or two a tile
            for bn, warps, block_k, split in itertools.product((64, 128, 256), (2, 4, 8), (256, 512), (1, 2, 4, 8)):
                if 32 * warps <= bn <= 64 * warps:
                    yield triton_linear.Plan.sliced(1, K, 1, bn, block_k, split, warps, int_dot=True, int_chunks=True)
            return
        block_k = 512 if fmt == "q6_k" else 256
        for bn, warps, split in itertools.product((32, 64, 128, 256), (1, 2, 4, 8), (1, 2, 4, 8)):
            if 8 * warps <= bn <= 64 * warps:      # from a quarter of a row to two rows a thread
                yield triton_linear.Plan.sliced(1, K, 1, bn, block_k, split, warps, int_dot=True)
        return
    if M == 1:
        wide = fmt in CHANNEL_FORMATS or fmt in SPLIT_FORMATS
        widths = (256,) if fmt in triton_linear.K_QUANTS else (256, 512, 1024) if fmt == "q6_k_split" \
            else (128, 256, 512, 1024) if wide else (128, 256, 512)
        for bn, bk, warps, split in itertools.product((16, 32, 64), widths, (4, 8), (1, 2, 4, 8, 16)):
            yield triton_linear.Plan.sliced(1, K, 1, bn, bk, split, warps)
        return
    rows = max(16, triton_linear.triton.next_power_of_2(M))
    k_quant = fmt in triton_linear.K_QUANTS         # a super-block a tile, the values unpacked in registers
    widths = (256,) if fmt in triton_linear.SUPER_BLOCK_TILES else (128, 256)
    for bn, bk, warps, stages, split, first in itertools.product((32, 64) if k_quant else (64, 128), widths, (4, 8),
                                                                 (3, 4), (1, 2, 4, 8), (False, True)):
        if bn >= 64 or not first:      # sm_90's wgmma takes 64 rows: a narrower first operand gains nothing
            yield triton_linear.Plan.sliced(M, K, rows, bn, bk, split, warps, stages, weights_first=first)


def swept_gemms(args, models, batch: int):
    """(model, format, GEMM, N, K) of ``--sweep-formats`` and ``--sweep-gemms`` at ``batch`` rows (the
    lm_head at batch 1 only when ``--sweep-gemms`` names it: a long sweep for one GEMM a token)."""
    for (model_name, model), fmt in itertools.product(models.items(), args.sweep_formats):
        for name, N, K in gemms(model):
            named = args.sweep_gemms and name in args.sweep_gemms
            if named or (not args.sweep_gemms and (name != "lm_head" or batch > 1)):
                yield model_name, fmt, name, N, K


def sweep(args, dev, models) -> tuple[list[dict], dict]:
    """Per batch of ``--sweep-batches``, GEMM and format: every candidate plan of the Triton family
    beside the heuristic's (a candidate whose output differs from the heuristic's is dropped, and
    counted). Returns the rows and the table of the plans that beat the heuristic's by more than 3%
    (``linear_plans.RECORDED``'s keys and values)."""
    from anydev.backends.triton_kernels import linear as triton_linear
    from anydev.backends.triton_kernels.linear_plans import device_name, rows_bucket

    timer = Timer(dev, args.reps)
    rows, recorded = [], {}
    for batch in args.sweep_batches:
        print(f"\n== plan sweep, batch {batch}: best plan vs the heuristic's (us)")
        for model_name, fmt, name, N, K in swept_gemms(args, models, batch):
            x = torch.randn(batch, K, device=dev).bfloat16()
            weights = copies_of(fmt, N, K, dev, args.tiny)

            def timed(p):
                return timer([lambda w=w, s=s: triton_linear.run(x, w, s, fmt, p) for w, s in weights])

            chosen = triton_linear.plan(batch, N, K, fmt, dev, x.dtype)
            want = triton_linear.run(x, *weights[0], fmt, chosen).float()
            results, wrong = {chosen: timed(chosen)}, 0
            for p in candidates(batch, K, fmt):
                if p in results or (args.sweep_widths and p.block_k not in args.sweep_widths):
                    continue
                got = triton_linear.run(x, *weights[0], fmt, p).float()
                if not torch.allclose(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item()):
                    wrong += 1
                    continue
                results[p] = timed(p)
            best = min(results, key=results.get)
            moved = weight_bytes(fmt, N, K) + 2 * batch * (K + N)
            gain = results[chosen] / results[best]
            print(f"{model_name} b{batch} {name:8} {fmt:9} heuristic {results[chosen]:7.1f} "
                  f"({moved / results[chosen] / 1e6:4.2f} TB/s) {chosen}  best {results[best]:7.1f} "
                  f"({moved / results[best] / 1e6:4.2f} TB/s, {gain:.2f}x) {best}"
                  + (f"  [{wrong} plans gave other outputs]" if wrong else ""), flush=True)
            rows.append({"model": model_name, "batch": batch, "gemm": name, "N": N, "K": K, "format": fmt,
                         "heuristic": str(chosen), "heuristic_us": results[chosen], "best": str(best),
                         "best_us": results[best], "wrong_plans": wrong})
            if gain > 1.03 and rows_bucket(batch) == batch:
                recorded[(device_name(dev), batch, fmt, N, K)] = (best.block_m, best.block_n, best.block_k,
                                                                  best.split, best.num_warps, best.num_stages) \
                    + ((True,) if best.weights_first else ())
                if args.table_out:      # as it grows: a run cut short keeps what it found
                    write_table(args.table_out, recorded)
            del weights
    return rows, recorded


def write_table(path: str, recorded: dict) -> None:
    """``recorded`` as lines to paste into ``linear_plans.RECORDED``."""
    with open(path, "w") as f:
        for key, value in sorted(recorded.items()):
            f.write(f"    {key!r}: {value!r},\n")
    print(f"wrote {len(recorded)} plan(s) that beat the heuristic to {path} (paste into linear_plans.RECORDED)", flush=True)


def read_table(path: str) -> dict:
    """The entries a ``--table-out`` file holds (:func:`write_table`'s lines), as a dict."""
    import ast

    with open(path) as f:
        return ast.literal_eval("{" + f.read() + "}")


def merge_plans(paths: list[str]) -> None:
    """Each ``--table-out`` file's plans merged into ``linear_plans.RECORDED`` for this process (a
    benchmark's ``--plans``: a sweep's winners run end to end before they are pasted into the tree)."""
    from anydev.backends.triton_kernels.linear_plans import RECORDED

    for path in paths:
        table = read_table(path)
        RECORDED.update(table)
        print(f"plans from {path}: {len(table)} merged into linear_plans.RECORDED for this run", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="nvidia")
    p.add_argument("--batches", type=lambda s: [int(b) for b in s.split(",")], default=[1, 32])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--tiny", action="store_true", help="one small shape (a smoke run, e.g. under Triton's interpreter)")
    p.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS), help=f"of {','.join(MODELS)}")
    p.add_argument("--formats", type=lambda s: s.split(","), default=["dense", *WEIGHT_FORMATS],
                   help="the table's columns: dense (torch's and the backend's bf16) and weight formats")
    p.add_argument("--float-gemv", action="store_true",
                   help="at batch 1 also time each GGUF format's float GEMV plan (the Triton kernel's, no integer dots) "
                        "and, for q8_0/q4_0/q4_1, the integer steps that read a block's words one a load (\"FMT words\")")
    p.add_argument("--sweep", action="store_true", help="also time the Triton kernel's candidate plans")
    p.add_argument("--sweep-formats", type=lambda s: s.split(","), default=["dense", "int8", "q8_0", "q4_k"])
    p.add_argument("--sweep-batches", type=lambda s: [int(b) for b in s.split(",")], default=[1],
                   help="rows of the swept calls (a batch above 1 sweeps the tl.dot tiles; recorded for 1, 16, 32, 64)")
    p.add_argument("--sweep-gemms", type=lambda s: s.split(","), default=None,
                   help="only these of qkv,o,gate_up,down,lm_head; default all but the lm_head at batch 1")
    p.add_argument("--sweep-widths", type=lambda s: [int(w) for w in s.split(",")], default=None,
                   help="only candidates of these inputs a step (block_k), e.g. 512,1024; default all")
    p.add_argument("--table-out", help="write the sweep's plans that beat the heuristic here, as linear_plans.RECORDED lines")
    p.add_argument("--skip-table", action="store_true", help="only the sweep (with --sweep)")
    p.add_argument("--out", help="write the rows as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    backend, dev, kernels = open_kernels(args.device)
    models = TINY if args.tiny else {name: MODELS[name] for name in args.models}
    with torch.inference_mode():
        rows = [] if args.skip_table else table(args, kernels, dev, models)
        sweep_rows, recorded = sweep(args, dev, models) if args.sweep else ([], {})
    if args.table_out:
        write_table(args.table_out, recorded)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": args.device, "hardware": backend.runtime.hardware_label, "torch": torch.__version__,
                       "kernels": kernels.describe(), "rows": rows, "sweep": sweep_rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
