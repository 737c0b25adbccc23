"""Session 34 (issue 31): the nvidia backend's own batch-1 GEMVs (backends/nvidia/gemv/) on the GPU,
beyond the conformance group's eager checks: NVRTC's compile time, and each format's GEMV inside a
captured graph between two Triton kernels (rms_norm before it, which writes its x, and silu_and_mul
after it, which reads its output; programmatic dependent launch as the engine runs them), replayed and
compared with the same calls run eagerly with the GEMVs off and with the float reference.

    python parts/gemv_check.py
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from kernel_bench import open_kernels                                          # noqa: E402

from anydev.backends.nvidia.gemv import kernel as own                          # noqa: E402
from anydev.conformance.test_kernels import random_weight                      # noqa: E402
from anydev.plugin_api import kernels as reference                             # noqa: E402
from anydev.plugin_api.weight_formats import dequantize                         # noqa: E402


def main() -> int:
    _, dev, kernels = open_kernels("nvidia")
    start = time.perf_counter()
    own._module(dev.index)
    print(f"NVRTC compile and load of gemv.cu: {time.perf_counter() - start:.2f} s")
    failed = 0
    for fmt, (N, K) in [("q4_k", (8192, 4096)), ("q4_k", (4096, 8192)), ("q8_0_split", (8192, 4096)),
                          ("q8_0_split", (1002, 4096)), ("q6_k_split", (8192, 4096)),
                          ("q6_k_split", (1002, 6144)), ("q6_k_split", (4096, 14336)), ("q4_0", (8192, 4096)),
                          ("q4_0", (1002, 14336)), ("q4_1", (6144, 4096)), ("q4_1", (1002, 2048))]:
        gen = torch.Generator().manual_seed(0)
        weight, scales = random_weight(fmt, N, K, gen)
        weight, scales = weight.to(dev), None
        h = torch.randn(1, K, generator=gen).bfloat16().to(dev)
        norm_w = (torch.rand(K, generator=gen) + 0.5).bfloat16().to(dev)

        def step():
            x = kernels.rms_norm(h, norm_w, 1e-6)
            y = kernels.quantized_linear(x, weight, scales, fmt)
            return kernels.silu_and_mul(y)

        if not own.takes(kernels.rms_norm(h, norm_w, 1e-6), weight, fmt):
            raise SystemExit(f"{fmt} {N}x{K}: the backend's own GEMV does not take this call")
        eager = step()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = step()
        for _ in range(3):
            graph.replay()
        os.environ[own.ENV] = "0"
        triton = step()
        os.environ[own.ENV] = "1"
        x = reference.rms_norm(h.float(), norm_w.float(), 1e-6)
        want = reference.silu_and_mul(x @ dequantize(weight, scales, fmt, K).T)
        torch.cuda.synchronize()
        scale = want.abs().max().item()
        errors = {name: (got.float() - want).abs().max().item() / scale
                  for name, got in (("eager", eager), ("graph", captured), ("triton", triton))}
        ok = errors["graph"] == errors["eager"] and errors["eager"] < 0.02
        failed += not ok
        print(f"{fmt} {N}x{K}: max |out - reference| / max |reference|: "
              + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()) + ("" if ok else "  FAILED"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
