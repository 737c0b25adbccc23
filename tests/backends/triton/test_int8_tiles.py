"""The int8 tiles of more than one row (``backends/triton_kernels/_gguf_int_tiles.py``) under Triton's
interpreter, in a process of its own: ``q8_0`` and ``q4_k`` codes times activations that int8 holds
exactly (each row's 32 inputs a block, their codes times 2**-6 with a 127 among them, so that only the
int8 dot, the scales and ``q4_k``'s mins are tested, not where a rounding falls) equal the reference
product to the output's rounding, for a full tile of rows, fewer rows than the tile, two tiles of
which the second is short, outputs past a tile's end, and K split into slices of which the last is
short. A plan that asks for these tiles where they do not apply is refused, naming why (outside the
interpreter: no launch)."""
from __future__ import annotations

import pytest

from anydev.backends.triton_kernels import triton_importable
from interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")


def test_the_int8_tiles_on_activations_int8_holds_exactly():
    run_interpreted("""
        import torch
        from anydev.backends.triton_kernels import linear
        from anydev.conformance.test_kernels import random_weight
        from anydev.plugin_api.weight_formats import dequantize

        cases = (("q8_0", 16, 48, 256, 128, 1), ("q8_0", 5, 40, 320, 64, 1), ("q8_0", 33, 24, 640, 128, 3),
                 ("q4_k", 16, 48, 512, 256, 1), ("q4_k", 5, 40, 768, 256, 2), ("q4_k", 33, 24, 512, 256, 1))
        for fmt, M, N, K, block_k, split in cases:
            gen = torch.Generator().manual_seed(M)
            weight, scales = random_weight(fmt, N, K, gen)
            codes = torch.randint(-127, 128, (M, K // 32, 32), generator=gen)
            codes[:, :, 0] = 127 * torch.where(torch.rand(M, K // 32, generator=gen) < 0.5, -1, 1)
            x = (codes.float().view(M, K) * 2 ** -6).bfloat16()
            p = linear.Plan.sliced(M, K, 16, 32, block_k, split, 4, int_dot=True)
            assert p.split == split, p
            got = linear.run(x, weight, scales, fmt, p).double()
            want = x.double() @ dequantize(weight, scales, fmt, K).double().T
            bound = 2 ** -7 * want.abs() + 1e-5 * want.abs().max()
            assert ((got - want).abs() <= bound).all(), (fmt, M, N, K, ((got - want).abs() / want.abs()).max())
        print("ok")
    """)


def test_the_int8_tiles_are_refused_where_they_do_not_apply():
    import torch

    from anydev.backends.triton_kernels import linear
    from anydev.conformance.test_kernels import random_weight
    from anydev.plugin_api.errors import InvalidArgumentError

    gen = torch.Generator().manual_seed(0)
    refused = (("q6_k", torch.bfloat16, 256, "a format of"), ("q8_0", torch.float16, 64, "bfloat16"),
               ("q8_0", torch.bfloat16, 48, "multiple of 32"), ("q4_k", torch.bfloat16, 512, "block_k must be 256"))
    for fmt, dtype, block_k, why in refused:
        weight, scales = random_weight(fmt, 32, 256, gen)
        x = torch.randn(16, 256).to(dtype)
        with pytest.raises(InvalidArgumentError, match=why):
            linear.run(x, weight, scales, fmt, linear.Plan.sliced(16, 256, 16, 32, block_k, 1, 4, int_dot=True))
    assert linear.int8_tiles("q8_0", torch.bfloat16) and linear.int8_tiles("q4_k", torch.bfloat16)
    assert not linear.int8_tiles("q8_0", torch.float32)
