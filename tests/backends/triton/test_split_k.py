"""Split-K in one launch (``backends/triton_kernels/_split_k.py``): the last slice to reach an output tile
sums the slices and resets the tile's arrival counter, so a split call repeated, or followed by a call
of another shape over the same counters, computes the product again (a counter left non-zero would
leave outputs unwritten). Under Triton's interpreter, in a process of its own (the interpreter is
chosen when triton is imported)."""
from __future__ import annotations


import pytest
import torch

from anydev.backends.triton_kernels import triton_importable
from interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")


def test_split_calls_repeat_the_product_and_leave_the_counters_zero():
    run_interpreted("""
        import torch
        from anydev.backends.triton_kernels import linear, _split_k
        from anydev.plugin_api.weight_formats import dequantize, quantize_per_channel
        cpu = torch.device("cpu")
        gen = torch.Generator().manual_seed(0)
        for M, N, K, block_m, block_n, block_k, split in ((1, 48, 1024, 1, 16, 128, 4), (20, 64, 512, 32, 32, 64, 3),
                                                          (1, 48, 1024, 1, 16, 128, 8)):
            x = torch.randn(M, K, generator=gen).bfloat16()
            w, s = quantize_per_channel(torch.randn(N, K, generator=gen), "int8")
            p = linear.Plan.sliced(M, K, block_m, block_n, block_k, split)
            assert p.split == split, p
            want = x.float() @ dequantize(w, s, "int8", K).T
            first = linear.run(x, w, s, "int8", p)
            again = linear.run(x, w, s, "int8", p)
            torch.testing.assert_close(first.float(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
            assert torch.equal(first, again), (M, N, K, split)
            assert int(_split_k.arrival_counters(cpu, 1).abs().sum()) == 0
        print("ok")
    """)


def test_a_split_launch_over_more_tiles_than_the_counters_is_refused():
    from anydev.backends.triton_kernels import _split_k
    from anydev.plugin_api.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="output tiles"):
        _split_k.arrival_counters(torch.device("cpu"), _split_k.MAX_TILES + 1)
