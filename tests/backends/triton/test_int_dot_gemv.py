"""The GGUF GEMVs' integer dots (``backends/triton_kernels/_int_dot.py``, ``_gguf_int_gemv.py``) under
Triton's interpreter, in a process of its own (the interpreter is chosen when triton is imported): the
portable ``dp4a`` equals four signed byte products added to the accumulator; the activations' int8
codes are ``round(x * 127 / max|x|)`` per 32 inputs, packed lowest byte first; and the batch-1 GEMV of
every GGUF format, on activations that int8 holds exactly (so that only the integer dots and the
scales are tested, not where a rounding falls), equals the reference product to the output's rounding
(one bfloat16 unit of each output), where the conformance suite allows 2% of the largest output. The
plans choose those steps only where they fit (outside the interpreter: no launch)."""
from __future__ import annotations


import pytest

from anydev.backends.triton_kernels import triton_importable
from interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")


def test_dp4a_and_the_packed_int8_codes():
    run_interpreted("""
        import torch, triton, triton.language as tl
        from anydev.backends.triton_kernels._int_dot import dp4a, quantized_rows, row_codes

        @triton.jit
        def kernel(x_ptr, a_ptr, b_ptr, c_ptr, words_ptr, scales_ptr, codes_ptr, dots_ptr):
            r = tl.arange(0, 4)[:, None]
            w = tl.arange(0, 8)[None, :]
            x = tl.load(x_ptr + r * 32 + tl.arange(0, 32)[None, :]).to(tl.float32)
            words, scales = quantized_rows(x)
            codes, _ = row_codes(x)
            tl.store(words_ptr + r * 8 + w, words)
            tl.store(scales_ptr + tl.arange(0, 4), scales)
            tl.store(codes_ptr + r * 32 + tl.arange(0, 32)[None, :], codes)
            i = tl.arange(0, 64)
            tl.store(dots_ptr + i, dp4a(tl.load(a_ptr + i), tl.load(b_ptr + i), tl.load(c_ptr + i), False))

        gen = torch.Generator().manual_seed(0)
        x = (torch.randn(4, 32, generator=gen) * torch.tensor([[1.0], [1e-3], [50.0], [0.0]])).bfloat16()
        a, b = (torch.randint(-2**31, 2**31, (64,), generator=gen, dtype=torch.int64).to(torch.int32) for _ in range(2))
        c = torch.randint(-2**20, 2**20, (64,), generator=gen, dtype=torch.int32)
        words, scales = torch.zeros(4, 8, dtype=torch.int32), torch.zeros(4)
        codes, dots = torch.zeros(4, 32, dtype=torch.int32), torch.zeros(64, dtype=torch.int32)
        kernel[(1,)](x, a, b, c, words, scales, codes, dots)
        amax = x.float().abs().amax(1, keepdim=True)
        want = torch.round(x.float() * torch.where(amax > 0, 127 / amax, 0.0))
        assert torch.equal(codes, want.int()), (codes, want)
        assert torch.equal(scales, amax[:, 0] / 127), scales
        assert torch.equal(words.view(torch.int8).view(4, 32).int(), codes), "codes packed lowest byte first"
        want_dots = c.long() + (a.view(torch.int8).view(64, 4).long() * b.view(torch.int8).view(64, 4).long()).sum(1)
        assert torch.equal(dots.long(), want_dots), (dots, want_dots)
        print("ok")
    """)


def test_the_integer_gemv_on_activations_int8_holds_exactly():
    """Every format by its heuristic plan, and split into slices of which the last is short (the
    aligned pairs of q8_0, q4_0 and q6_k cross no slice's end); the 32-value blocks both in aligned
    chunks (K a multiple of 256; also two steps a tile, the second past K) and a block's words a load
    (K not)."""
    run_interpreted("""
        import torch
        from anydev.backends.triton_kernels import linear
        from anydev.conformance.test_kernels import random_weight
        from anydev.plugin_api.weight_formats import dequantize

        cases = (("q8_0", 40, 512, 1), ("q4_0", 33, 768, 1), ("q4_0", 40, 768, 2), ("q4_1", 24, 512, 1),
                 ("q4_k", 40, 768, 1), ("q4_k", 24, 768, 2), ("q6_k", 24, 512, 1), ("q6_k", 20, 1536, 2),
                 ("q4_0", 24, 576, 1), ("q4_1", 24, 544, 1), ("q8_0", 24, 768, 512))
        for fmt, N, K, split in cases:
            gen = torch.Generator().manual_seed(3)
            weight, scales = random_weight(fmt, N, K, gen)
            # codes times 2**-6, each 32 holding a 127: the int8 rounding returns them exactly
            codes = torch.randint(-127, 128, (K // 32, 32), generator=gen)
            codes[:, 0] = 127 * torch.where(torch.rand(K // 32, generator=gen) < 0.5, -1, 1)
            x = (codes.float().view(1, K) * 2 ** -6).bfloat16()
            p = linear.plan(1, N, K, fmt, x.device, x.dtype)
            assert p.int_dot and p.int_chunks == (fmt in linear.INT_CHUNK_FORMATS and K % 256 == 0), (fmt, p)
            if split == 512:    # one tile of two steps, the second past K
                p = linear.Plan.sliced(1, K, 1, p.block_n, 512, 1, p.num_warps, int_dot=True, int_chunks=True)
            elif split > 1:
                p = linear.Plan.sliced(1, K, 1, p.block_n, p.block_k, split, p.num_warps, int_dot=True,
                                       int_chunks=p.int_chunks)
                assert p.k_per_split * (p.split - 1) < K < p.k_per_split * p.split, p
            got = linear.run(x, weight, scales, fmt, p).double()
            want = x.double() @ dequantize(weight, scales, fmt, K).double().T
            # the interpreter rounds bfloat16 toward zero: within one unit in the last place, 2**-7
            bound = 2 ** -7 * want.abs() + 1e-5 * want.abs().max()
            assert ((got - want).abs() <= bound).all(), (fmt, split, ((got - want).abs() / want.abs()).max())
        print("ok")
    """)


def test_the_plans_choose_integer_dots_where_their_steps_fit_and_refuse_them_elsewhere():
    """bfloat16 at batch 1 with K a multiple of the step's pairs: integer dots; float16, more rows, or
    a K whose pairs would straddle a row's end (q4_0 K % 64, q6_k K % 512): the float GEMV. A plan that
    asks for integer dots where they do not fit is refused, naming why."""
    import torch

    from anydev.backends.triton_kernels import linear
    from anydev.plugin_api.errors import InvalidArgumentError

    cpu = torch.device("cpu")
    for fmt, K in (("q4_k", 768), ("q8_0", 576), ("q4_0", 576), ("q4_1", 544), ("q6_k", 1024)):
        chosen = linear.plan(1, 64, K, fmt, cpu, torch.bfloat16)
        assert chosen.int_dot and linear.int_dot_tile(fmt, chosen.block_k), (fmt, chosen)
        assert not linear.plan(1, 64, K, fmt, cpu, torch.float16).int_dot
        assert not linear.plan(2, 64, K, fmt, cpu, torch.bfloat16).int_dot
    assert linear.plan(1, 64, 1024, "q6_k", cpu, torch.bfloat16).block_k == 512
    for fmt in linear.INT_CHUNK_FORMATS:     # aligned chunks where K is a multiple of 256, else a block's words
        assert linear.plan(1, 64, 768, fmt, cpu, torch.bfloat16).int_chunks, fmt
        assert not linear.plan(1, 64, 576, fmt, cpu, torch.bfloat16).int_chunks, fmt
    for fmt, K in (("q4_0", 544), ("q8_0", 544), ("q6_k", 768)):
        assert not linear.int_dots(fmt, torch.bfloat16, K), fmt
        chosen = linear.plan(1, 64, K, fmt, cpu, torch.bfloat16)
        assert not chosen.int_dot and chosen.block_k in (128, 256), (fmt, chosen)
    weight = torch.zeros(8, 768 // 256 * 210, dtype=torch.uint8)
    x = torch.zeros(1, 768, dtype=torch.bfloat16)
    for p in (linear.Plan.sliced(1, 768, 1, 64, 512, 1, int_dot=True), linear.Plan.sliced(1, 768, 1, 64, 256, 1, int_dot=True)):
        with pytest.raises(InvalidArgumentError, match="integer-dot plan"):
            linear.run(x, weight, None, "q6_k", p)
    with pytest.raises(InvalidArgumentError, match="integer-dot plan"):
        linear.run(x.half(), weight, None, "q6_k", linear.Plan.sliced(1, 768, 1, 64, 256, 1, int_dot=True))
    q4_0 = torch.zeros(8, 576 // 32 * 18, dtype=torch.uint8)
    for p in (linear.Plan.sliced(1, 576, 1, 64, 256, 1, int_dot=True, int_chunks=True),     # K % 256
              linear.Plan.sliced(1, 576, 1, 64, 256, 1, int_chunks=True)):                  # no integer dots
        with pytest.raises(InvalidArgumentError, match="aligned chunks"):
            linear.run(torch.zeros(1, 576, dtype=torch.bfloat16), q4_0, None, "q4_0", p)
