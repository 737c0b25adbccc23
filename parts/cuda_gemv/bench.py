"""Session 33 experiment (issue 31): the batch-1 q4_k and q8_0_split GEMVs of the 8B shapes in CUDA C
(gemv.cu, compiled to an sm_90 cubin on the CPU machine: `nvcc -cubin -arch=sm_90 -O3 -maxrregcount=128`)
beside the Triton kernel's, each checked against the float reference (weight_formats.dequantize) and
timed as benchmarks/linear_bench.py times a GEMM (a graph of one call per weight copy, past the L2).
Loaded and launched through the CUDA driver (ctypes), on torch's current stream.

    python parts/cuda_gemv/bench.py --cubin gemv.cubin --formats q4_k,q8_0_split --out cuda-gemv.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from kernel_bench import open_kernels                                         # noqa: E402
from linear_bench import MODELS, Timer, copies_of, gemms, weight_bytes         # noqa: E402

from anydev.plugin_api.weight_formats import dequantize                        # noqa: E402

#: The cubin's kernels ``PREFIX_gemv_NAME`` of each format: NAME -> rows a warp.
_ROWS = {"r1": 1, "r2": 2, "r4": 4, "r2_u2": 2, "r1_u4": 1, "r2_pf": 2, "r4_pf": 4}
VARIANTS = {"q4_k": ("q4k", {**_ROWS, "r2_unrounded": 2}), "q8_0_split": ("q8s", _ROWS)}
#: Timing only: the GEMV with x's rounding skipped (its output is garbage, its error not checked).
UNCHECKED = {"r2_unrounded"}


class Driver:
    """The cubin's kernels, launched with cuLaunchKernel."""

    def __init__(self, cubin: bytes):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.module = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), cubin), "cuModuleLoadData")
        self.functions = {}
        for fmt, (prefix, variants) in VARIANTS.items():
            for name in variants:
                fn = ctypes.c_void_p()
                symbol = f"{prefix}_gemv_{name}".encode()
                self._check(self.cuda.cuModuleGetFunction(ctypes.byref(fn), self.module, symbol),
                            f"cuModuleGetFunction {symbol}")
                self.functions[fmt, name] = fn

    def _check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed: CUresult {status}")

    def launch(self, fmt, name, weight, x, out, N, K):
        rows = 8 * VARIANTS[fmt][1][name]
        args = [ctypes.c_void_p(weight.data_ptr()), ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                ctypes.c_int(N), ctypes.c_int(K), ctypes.c_longlong(weight.shape[1])]
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self._check(self.cuda.cuLaunchKernel(self.functions[fmt, name], (N + rows - 1) // rows, 1, 1, 256, 1, 1,
                                             K + K // 4, stream, params, None), f"cuLaunchKernel {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cubin", required=True)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--formats", default="q4_k,q8_0_split")
    p.add_argument("--out")
    args = p.parse_args()
    _, dev, kernels = open_kernels("nvidia")
    torch.empty(1, device=dev)                          # the primary context, current on this thread
    driver = Driver(Path(args.cubin).read_bytes())
    timer = Timer(dev, args.reps)
    model = MODELS["8B"]
    rows, totals = [], {}
    for fmt in args.formats.split(","):
        per_token = totals[fmt] = {}
        print(f"== 8B {fmt} at batch 1: us per call (TB/s); error: max |out - reference| / max |reference|")
        for name, N, K in gemms(model):
            copies = copies_of(fmt, N, K, dev, False)
            x = torch.randn(1, K, device=dev).bfloat16()
            reference = F.linear(x.float(), dequantize(copies[0][0], None, fmt, K)).view(-1)
            scale = reference.abs().max().item()
            layers = 1 if name == "lm_head" else model[-1]
            moved = weight_bytes(fmt, N, K) + 2 * (K + N)
            cells = []
            calls = {"triton": lambda w: kernels.quantized_linear(x, w, None, fmt)}
            for variant in VARIANTS[fmt][1]:
                out = torch.empty(N, dtype=torch.bfloat16, device=dev)
                calls[variant] = lambda w, v=variant, out=out: driver.launch(fmt, v, w, x, out, N, K) or out
            for method, call in calls.items():
                got = call(copies[0][0])
                torch.cuda.synchronize()
                err = float("nan") if method in UNCHECKED else \
                    (got.float().view(-1) - reference).abs().max().item() / scale
                us = timer([lambda w=w: call(w) for w, _ in copies])
                per_token[method] = per_token.get(method, 0.0) + us * layers
                rows.append(dict(format=fmt, gemm=name, N=N, K=K, method=method, us=us, tb_per_s=moved / us / 1e6,
                                 error=err))
                cells.append(f"{method} {us:6.1f} ({moved / us / 1e6:4.2f}, err {err:.1e})")
            print(f"{name:8} {N:6}x{K:<6} " + " | ".join(cells), flush=True)
            shape = [r for r in rows
                     if (r["format"], r["gemm"]) == (fmt, name) and r["method"] not in UNCHECKED | {"triton"}]
            per_token["best a shape"] = per_token.get("best a shape", 0.0) + min(r["us"] for r in shape) * layers
            del copies
        print("GEMMs per token (ms): " + " | ".join(f"{m} {us / 1e3:.3f}" for m, us in per_token.items()))
        best = min((m for m in per_token if m not in UNCHECKED | {"triton", "best a shape"}), key=per_token.get)
        print(f"{fmt}: best CUDA variant {best}: {per_token['triton'] / per_token[best]:.3f}x the Triton GEMVs "
              f"a token; the best variant of each shape: {per_token['triton'] / per_token['best a shape']:.3f}x",
              flush=True)
    if args.out:
        json.dump(dict(rows=rows, per_token_us=totals), open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
