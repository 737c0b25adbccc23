"""Variants of the nvidia backend's own batch-1 GEMVs (backends/nvidia/gemv/gemv.cu), timed beside the
landed ones and the Triton kernel at the 8B shapes, each checked against the float reference: what the
next change to gemv.cu should be, measured before it is made. A variant is the landed source with text
replaced (e.g. a loop's unroll pragma), compiled with the landed NVRTC path and launched as the landed
kernels are (programmatic dependent launch in the Triton kernels' mode, in a graph of one call per
weight copy, past the L2: linear_bench's timer).

    python parts/gemv_variants.py --formats q8_0_split,q4_k,q6_k_split
    python parts/gemv_variants.py --formats q8_0_split --warps 16,32     # also blocks of 16 and 32 warps
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from kernel_bench import open_kernels                                         # noqa: E402
from linear_bench import MODELS, Timer, copies_of, gemms, weight_bytes         # noqa: E402

from anydev.backends.nvidia.gemv import kernel as own                          # noqa: E402
from anydev.backends.nvidia.gemv.driver import Module                          # noqa: E402
from anydev.backends.nvidia.gemv.nvrtc import compile_cubin                    # noqa: E402
from anydev.backends.triton_kernels._common import pdl                         # noqa: E402
from anydev.plugin_api.weight_formats import dequantize                        # noqa: E402

#: The L2 prefetch of MODE 3 (each lane one 128-byte line of its warp's row, 4 KB a row).
_PREFETCH = ("if (MODE == 3 && row != nullptr && lane * 128 < row_bytes)\n"
             "    asm volatile(\"prefetch.global.L2 [%0];\" ::\"l\"(row + lane * 128));")
#: Variants of every format: no prefetch; the whole row prefetched (rows above 4 KB: q4_k's 8,192 inputs);
#: the registers capped for full occupancy.
COMMON = {"no L2 prefetch": (_PREFETCH, ""),
          "whole row prefetched": (_PREFETCH, "if (MODE == 3 && row != nullptr)\n    for (long long at = lane * 128; "
                                   "at < row_bytes; at += 32 * 128)\n      asm volatile(\"prefetch.global.L2 [%0];\" "
                                   "::\"l\"(row + at));"),
          # at most 32 registers a thread: 8 blocks of 8 warps an SM, where 33-40 registers allow 6
          "8 blocks an SM": ("__launch_bounds__(WARPS * 32)", "__launch_bounds__(WARPS * 32, 8)")}


def _unroll(loop: str, landed: int, to: int) -> tuple[str, str]:
    """(old, new) text of gemv.cu: the loop starting ``loop`` unrolled ``to`` times, not ``landed``."""
    return f"#pragma unroll {landed}\n  {loop}", f"#pragma unroll {to}\n  {loop}"


#: q4_0 / q4_1: the registers the compiler picks with no floor of 3 blocks an SM (q4_1: 48, spilling).
_Q4 = {"q4 compiler's registers": ("__launch_bounds__(WARPS * 32, 3)", "__launch_bounds__(WARPS * 32)")}
#: Variant name -> (old text, new text) of gemv.cu, per format's kernel.
_Q6S_LOOP = "    for (int at = first; at < K; at += 32 * 32)"
VARIANTS = {"q8_0_split": {f"q8s unroll {n}": _unroll("for (int at = lane * 16", 1, n) for n in (2, 4, 8)}
            | {"q8s L2 asked": ("begin_block<MODE, false>", "begin_block<MODE, true>")},
            "q4_k": {f"q4k unroll {n}": _unroll("for (int s = lane >> 3", 4, n) for n in (1, 2)},
            "q6_k_split": {f"q6s unroll {n}": (_Q6S_LOOP, f"#pragma unroll {n}\n{_Q6S_LOOP}") for n in (1, 2, 4)},
            "q4_0": _Q4, "q4_1": _Q4}


def variant_module(dev, old: str, new: str) -> Module | None:
    """The variant compiled, or None where this tree's gemv.cu does not hold ``old`` (a pending patch
    changed that text: the variant is then skipped, and said so)."""
    source = (Path(own.__file__).parent / "gemv.cu").read_text()
    if old not in source:
        return None
    major, minor = torch.cuda.get_device_capability(dev)
    return Module(compile_cubin(source.replace(old, new), "gemv.cu", 10 * major + minor), own.KERNELS)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--formats", default="q8_0_split,q4_k,q6_k_split")
    p.add_argument("--warps", default="", help="comma list: also the landed source compiled for blocks of "
                   "W warps (x rounded once for a block's rows, every row its own warp)")
    p.add_argument("--model", default="8B", choices=sorted(MODELS))
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    _, dev, kernels = open_kernels("nvidia")
    mode = pdl(dev)["USE_PDL"]
    timer, model = Timer(dev, args.reps), MODELS[args.model]
    for fmt in args.formats.split(","):
        modules = {"landed": own._module(dev.index)}
        for name, (old, new) in {**VARIANTS[fmt], **COMMON}.items():
            module = variant_module(dev, old, new)
            if module is None:
                print(f"{fmt}: variant {name!r} skipped: this gemv.cu does not hold {old!r}")
            else:
                modules[name] = module
        wide = {w: variant_module(dev, f"#define WARPS {own.WARPS}\n", f"#define WARPS {w}\n")
                for w in [int(w) for w in args.warps.split(",") if w]}
        totals: dict[str, float] = {}
        print(f"== {args.model} {fmt} at batch 1, PDL mode {mode}: us a call (TB/s); error against the float "
              "reference")
        for name, N, K in gemms(model):
            if not own.fits(fmt, 1, K, torch.bfloat16):
                continue
            copies = copies_of(fmt, N, K, dev, False)
            x = torch.randn(1, K, device=dev).bfloat16()
            w0, s0 = copies[0]
            want = (x.float() @ dequantize(w0, s0, fmt, K).T).view(-1)
            cells, moved = [], weight_bytes(fmt, N, K) + 2 * (K + N)
            calls = {"triton": lambda w, s: kernels.quantized_linear.__wrapped__(x, w, s, fmt)}
            for variant, module in modules.items():
                calls[variant] = lambda w, s, module=module: own.launch(module, x, w, fmt, mode)
            for n, module in wide.items():
                calls[f"{n} warps"] = lambda w, s, n=n, module=module: own.launch(module, x, w, fmt, mode, warps=n)
            for variant, call in calls.items():
                error = (call(w0, s0).float().view(-1) - want).abs().max().item() / want.abs().max().item()
                us = timer([lambda w=w, s=s, call=call: call(w, s) for w, s in copies])
                layers = 1 if name == "lm_head" else model[-1]
                totals[variant] = totals.get(variant, 0.0) + us * layers
                cells.append(f"{variant} {us:6.1f} ({moved / us / 1e6:4.2f}, {error:.1e})")
            print(f"{name:8} {N:6}x{K:<6} " + " | ".join(cells), flush=True)
            del copies
        print(f"{fmt}: the GEMMs it takes, ms a token: "
              + " | ".join(f"{v} {us / 1e3:.3f}" for v, us in totals.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
