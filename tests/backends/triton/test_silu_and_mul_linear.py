"""The Triton silu_and_mul_linear (contract 1.11, ``backends/triton_kernels/linear.py``) under Triton's
interpreter, in a process of its own: on every path of the linear kernel (the float GEMVs, the
32-value blocks' and the k-quants' float and integer-dot steps, a block's words a load and aligned
chunks, K split into slices, the ``tl.dot`` tiles of a few rows) and above ``DENSE_MAX_ROWS`` (composed),
its result equals exactly that of the Triton ``silu_and_mul`` then the same kernel with the same plan:
the activation is formed, and rounded, where it loads as the separate kernel forms it. Strided rows."""
from __future__ import annotations

import pytest

from anydev.backends.triton_kernels import triton_importable
from interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")


def test_the_fused_kernel_equals_silu_and_mul_then_the_projection_on_every_path():
    run_interpreted("""
        import torch
        from anydev.backends.triton_kernels import linear
        from anydev.backends.triton_kernels.activation import silu_and_mul
        from anydev.conformance.test_kernels import random_weight

        bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
        # (format, dtype, T, N, K, split): bfloat16 at T 1 takes the integer dots (chunks where K % 256 == 0)
        cases = [("dense", f16, 1, 40, 512, 1), ("dense", f32, 1, 24, 768, 2), ("dense", bf16, 3, 24, 512, 1),
                 ("int8", bf16, 1, 40, 512, 2), ("fp8_e4m3", f16, 3, 24, 512, 1),
                 ("q8_0", bf16, 1, 40, 512, 1), ("q8_0", bf16, 1, 24, 576, 1), ("q8_0", f16, 1, 24, 512, 2),
                 ("q4_0", bf16, 1, 33, 768, 2), ("q4_0", bf16, 1, 24, 576, 1), ("q4_0", f32, 3, 24, 512, 1),
                 ("q4_1", bf16, 1, 24, 512, 1), ("q4_1", bf16, 1, 24, 544, 1), ("q4_1", f16, 1, 24, 512, 1),
                 ("q4_k", bf16, 1, 40, 768, 2), ("q4_k", f16, 1, 24, 512, 1), ("q4_k", bf16, 5, 24, 512, 1),
                 ("q6_k", bf16, 1, 20, 1536, 2), ("q6_k", f32, 1, 24, 512, 1), ("q6_k", bf16, 3, 24, 512, 1),
                 ("q4_k", bf16, 20, 24, 256, 1), ("dense", bf16, 20, 24, 256, 1)]
        for i, (fmt, dtype, T, N, K, split) in enumerate(cases):
            gen = torch.Generator().manual_seed(i)
            if fmt == "dense":
                weight, scales = (torch.randn(N, K, generator=gen) / K ** 0.5).to(dtype), None
            else:
                weight, scales = random_weight(fmt, N, K, gen)
            x = (3 * torch.randn(T, 2 * K + 8, generator=gen)).to(dtype)[:, 8:]
            weight_format = None if fmt == "dense" else fmt
            got = linear.silu_and_mul_linear(x, weight, scales, weight_format)
            hidden = silu_and_mul(x)
            if T > linear.DENSE_MAX_ROWS:
                want = linear.linear(hidden, weight) if fmt == "dense" else \
                    linear.quantized_linear(hidden, weight, scales, fmt)
            else:
                p = linear.plan(T, N, K, fmt, x.device, dtype)
                assert p.int_dot == (T == 1 and dtype == bf16 and fmt not in ("dense", "int8", "fp8_e4m3")), (fmt, p)
                if split > 1:
                    p = linear.Plan.sliced(T, K, p.block_m, p.block_n, p.block_k, split, p.num_warps,
                                           int_dot=p.int_dot, int_chunks=p.int_chunks)
                    got = linear.run(x, weight, scales, fmt, p, gated=True)
                want = linear.run(hidden, weight, scales, fmt, p)
            assert got.dtype == dtype and got.shape == (T, N) and got.is_contiguous(), (fmt, got.shape)
            assert torch.equal(got, want), (fmt, dtype, T, K, split, (got.float() - want.float()).abs().max())
        print("ok")
    """)
