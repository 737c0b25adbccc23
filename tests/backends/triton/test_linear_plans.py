"""The linear kernel family's recorded plans (``backends/triton_kernels/linear_plans.py``): ``plan`` takes
the one recorded for the device, rows bucket, weight format and shape, and its heuristic's elsewhere;
a recorded plan, its pipeline stages included, computes the reference product (under Triton's
interpreter, in a process of its own: the interpreter is chosen when triton is imported)."""
from __future__ import annotations

import textwrap

import pytest
import torch

from anydev.backends.triton_kernels import triton_importable
from interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")
CPU = torch.device("cpu")
RECORDED = (32, 128, 128, 2, 8, 4)     # block_m, block_n, block_k, split, num_warps, num_stages


def test_plan_takes_the_recorded_plan_of_its_bucket_and_the_heuristic_elsewhere(monkeypatch):
    from anydev.backends.triton_kernels import linear, linear_plans

    others = [(20, 512, 1024, "fp8_e4m3"), (20, 512, 2048, "int8"), (33, 512, 1024, "int8"), (80, 512, 1024, "int8"),
              (1, 512, 1024, "int8")]
    heuristic = {call: linear.plan(*call, CPU) for call in others}
    monkeypatch.setitem(linear_plans.RECORDED, ("cpu", 32, "int8", 512, 1024), RECORDED)
    for rows in (17, 20, 32):                                  # the bucket of 32 rows
        got = linear.plan(rows, 512, 1024, "int8", CPU)
        assert (got.block_m, got.block_n, got.block_k, got.split, got.num_warps, got.num_stages) == RECORDED
        assert got.k_per_split == 512
    for call, want in heuristic.items():                       # another format, K, bucket, or none
        assert linear.plan(*call, CPU) == want, call
    assert linear_plans.rows_bucket(16) == 16 and linear_plans.rows_bucket(65) is None



@pytest.mark.parametrize("weight_format, block_k", [("q6_k", 512), ("q4_k", 256), ("q8_0", 512)])
def test_a_gguf_batch_1_plan_is_the_integer_dot_gemvs_only(monkeypatch, weight_format, block_k):
    """A recorded GGUF batch-1 plan (measured on the integer-dot GEMV: bfloat16) is not taken by a
    float32 or float16 call, which runs the float GEMV whose q6_k steps take one super-block."""
    from anydev.backends.triton_kernels import linear, linear_plans

    heuristic = {dtype: linear.plan(1, 4096, 4096, weight_format, CPU, dtype) for dtype in (torch.float32, torch.float16)}
    monkeypatch.setitem(linear_plans.RECORDED, ("cpu", 1, weight_format, 4096, 4096), (1, 64, block_k, 8, 4, None))
    taken = linear.plan(1, 4096, 4096, weight_format, CPU, torch.bfloat16)
    assert (taken.block_n, taken.block_k, taken.split, taken.int_dot) == (64, block_k, 8, True), taken
    for dtype, want in heuristic.items():
        assert linear.plan(1, 4096, 4096, weight_format, CPU, dtype) == want, dtype


def test_a_recorded_plan_computes_the_reference_product():
    script = textwrap.dedent(f"""
        import torch
        from anydev.backends.triton_kernels import linear, linear_plans
        from anydev.plugin_api.weight_formats import dequantize, quantize_per_channel
        torch.manual_seed(0)
        x = torch.randn(20, 256).bfloat16()
        w, s = quantize_per_channel(torch.randn(64, 256), "int8")
        linear_plans.RECORDED[("cpu", 32, "int8", 64, 256)] = (32, 32, 64, 2, 4, 3)
        p = linear.plan(20, 64, 256, "int8", torch.device("cpu"))
        assert (p.block_m, p.split, p.num_stages) == (32, 2, 3), p
        got = linear.run(x, w, s, "int8", p).float()
        want = x.float() @ dequantize(w, s, "int8", 256).T
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
        print("ok")
    """)
    run_interpreted(script)


def test_a_split_whose_last_slice_is_short_computes_the_reference_product():
    """K of 3 super-blocks in slices of 2 (24 blocks of 32 in slices of 5): the last slice is short. The batch-1 GEMV of every format reads
    only its own slice (the GGUF K-quant steps read their inputs unmasked)."""
    script = textwrap.dedent("""
        import torch
        from anydev.backends.triton_kernels import linear
        from anydev.plugin_api.weight_formats import BLOCK_FORMATS, dequantize, quantize_per_channel
        from anydev.conformance.test_kernels import random_weight
        N, K = 40, 768
        x = torch.randn(1, K, generator=torch.Generator().manual_seed(1)).bfloat16()
        for fmt in ("int8", *BLOCK_FORMATS):
            w, s = random_weight(fmt, N, K, torch.Generator().manual_seed(2))
            block_k = 256 if fmt in ("q4_k", "q6_k", "int8") else 32
            p = linear.Plan.sliced(1, K, 1, 16, block_k, 2 if block_k == 256 else 5)
            assert p.k_per_split * (p.split - 1) < K < p.k_per_split * p.split, p
            got = linear.run(x, w, s, fmt, p).float()
            want = x.float() @ dequantize(w, s, fmt, K).T
            torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item(), msg=fmt)
        print("ok")
    """)
    run_interpreted(script)


def test_a_k_quant_plan_must_take_whole_super_blocks():
    """q4_k and q6_k tiles are 256-value super-blocks: a plan of another width is refused, naming it."""
    from anydev.backends.triton_kernels import linear
    from anydev.plugin_api.errors import InvalidArgumentError

    x = torch.zeros(2, 512)
    weight = torch.zeros(8, 512 // 256 * 144, dtype=torch.uint8)
    for rows in (1, 2):
        with pytest.raises(InvalidArgumentError, match="block_k must be 256"):
            linear.run(x[:rows], weight, None, "q4_k", linear.Plan.sliced(rows, 512, 16 if rows > 1 else 1, 32, 128, 1))
    assert linear.plan(2, 8, 512, "q6_k", CPU).block_k == linear.plan(1, 8, 512, "q6_k", CPU).block_k == 256


def test_the_nibble_formats_tiles_take_the_weights_first_and_a_recorded_plan_may_say_either(monkeypatch):
    """The heuristic puts the weights first in the ``tl.dot`` tiles of ``WEIGHTS_FIRST_FORMATS`` only
    (never in a GEMV); a recorded plan says so by a seventh field, and its six fields mean the weights second."""
    from anydev.backends.triton_kernels import linear, linear_plans

    for fmt in ("q4_k", "q4_0", "q4_1", "q6_k_split"):
        tile = linear.plan(32, 4096, 4096, fmt, CPU, torch.bfloat16)
        assert tile.weights_first and tile.block_n == 64, (fmt, tile)
        assert not linear.plan(1, 4096, 4096, fmt, CPU, torch.bfloat16).weights_first
    for fmt in ("dense", "int8", "fp8_e4m3", "q8_0", "q8_0_split", "q6_k"):
        assert not linear.plan(32, 4096, 4096, fmt, CPU, torch.bfloat16).weights_first, fmt
    monkeypatch.setitem(linear_plans.RECORDED, ("cpu", 32, "q6_k", 512, 1024), (32, 64, 256, 2, 4, 3, True))
    monkeypatch.setitem(linear_plans.RECORDED, ("cpu", 32, "q4_k", 512, 1024), (32, 32, 256, 2, 4, 3))
    assert linear.plan(20, 512, 1024, "q6_k", CPU).weights_first
    assert not linear.plan(20, 512, 1024, "q4_k", CPU).weights_first


def test_weights_first_is_refused_for_a_gemv():
    from anydev.backends.triton_kernels import linear
    from anydev.plugin_api.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="weights_first"):
        linear.run(torch.zeros(1, 256), torch.zeros(8, 256), None, "dense",
                   linear.Plan.sliced(1, 256, 1, 16, 64, 1, weights_first=True))


def test_either_operand_order_computes_the_reference_product():
    """Every weight format's ``tl.dot`` tile, the weights first and second, K split with a short last
    slice, rows and outputs short of their blocks: the reference product either way."""
    script = textwrap.dedent("""
        import torch
        from anydev.backends.triton_kernels import linear
        from anydev.plugin_api.weight_formats import WEIGHT_FORMATS, dequantize
        from anydev.conformance.test_kernels import random_weight
        N, K = 72, 768
        x = torch.randn(20, K, generator=torch.Generator().manual_seed(1)).bfloat16()
        for fmt in ("dense", *WEIGHT_FORMATS):
            if fmt == "dense":
                w, s = (torch.randn(N, K, generator=torch.Generator().manual_seed(2)) / K ** 0.5).bfloat16(), None
                want = x.float() @ w.float().T
            else:
                w, s = random_weight(fmt, N, K, torch.Generator().manual_seed(2))
                want = x.float() @ dequantize(w, s, fmt, K).T
            for first in (False, True):
                p = linear.Plan.sliced(20, K, 32, 64, 256, 2, weights_first=first)
                assert p.k_per_split * (p.split - 1) < K < p.k_per_split * p.split, p
                got = linear.run(x, w, s, fmt, p).float()
                torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item(),
                                           msg=f"{fmt} weights_first={first}")
        print("ok")
    """)
    run_interpreted(script)
