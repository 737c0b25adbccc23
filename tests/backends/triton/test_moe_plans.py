"""moe_linear's few-rows GEMV plans (``backends/triton_kernels/moe_plans.py``): a recorded plan is taken
over the heuristic, the heuristic splits K only where the rows' programs leave the device idle, and a
split launch (every weight-format family of tiles) computes the reference's product, again when
repeated, leaving the arrival counters zero. The launches run under Triton's interpreter in a process
of their own (the interpreter is chosen when triton is imported)."""
from __future__ import annotations

import pytest
import torch

from anydev.backends.triton_kernels import triton_importable
from interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")

H200_FILL = 4 * 132


def test_a_recorded_plan_is_taken_over_the_heuristic():
    from anydev.backends.triton_kernels import moe_plans

    cpu = torch.device("cpu")
    table = {("cpu", 8, "dense", 1536, 2048): (64, 128, 2, 8, 3)}
    p = moe_plans.gemv_plan(8, 1536, 2048, "dense", cpu, table)
    assert (p.block_n, p.block_k, p.split, p.num_warps, p.num_stages) == (64, 128, 2, 8, 3)
    assert moe_plans.gemv_plan(8, 2048, 768, "dense", cpu, table) == moe_plans.heuristic(8, 2048, 768, "dense", 32)


def test_the_heuristic_splits_k_only_where_the_programs_leave_the_device_idle():
    from anydev.backends.triton_kernels import moe_plans

    decode = moe_plans.heuristic(8, 1536, 2048, "dense", H200_FILL)          # Qwen3-30B-A3B gate/up, top 8
    assert decode.split == 1 and (1536 // decode.block_n) * 8 >= H200_FILL
    shard = moe_plans.heuristic(8, 192, 2048, "dense", H200_FILL)            # its TP-8 shard: 96 programs
    programs = (192 // shard.block_n) * 8
    assert shard.split > 1 and programs * shard.split <= H200_FILL
    assert shard.k_per_split // shard.block_k >= 4
    assert moe_plans.heuristic(8, 192, 768, "dense", H200_FILL).split == 1    # too few steps to split


def test_split_gemv_launches_equal_the_reference_and_repeat():
    run_interpreted("""
        import torch
        from anydev.backends.triton_kernels import moe, _split_k
        from anydev.backends.triton_kernels.linear import Plan
        from anydev.conformance.test_kernels import random_weight
        from anydev.plugin_api import kernels as reference
        cpu = torch.device("cpu")
        gen = torch.Generator().manual_seed(0)
        R, E, N, K = 3, 4, 40, 1280          # slices of unequal length
        for fmt, block_n, block_k, split in (("dense", 16, 128, 4), ("int8", 16, 256, 3), ("q8_0", 32, 128, 2),
                                             ("q4_k", 32, 256, 2)):
            x = torch.randn(R, K, generator=gen).bfloat16()
            ids = torch.tensor([3, 0, 3])
            if fmt == "dense":
                weight, scales = (torch.randn(E, N, K, generator=gen) / K ** 0.5).bfloat16(), None
            else:
                parts = [random_weight(fmt, N, K, gen) for _ in range(E)]
                weight = torch.stack([w for w, _ in parts])
                scales = None if parts[0][1] is None else torch.stack([s for _, s in parts])
            p = Plan.sliced(1, K, 1, block_n, block_k, split)
            assert p.split == split, p
            want = reference.moe_linear(x.float(), weight.float() if fmt == "dense" else weight, scales,
                                        None if fmt == "dense" else fmt, ids)
            first = moe.gemv(x, weight, scales, fmt, ids, p)
            again = moe.gemv(x, weight, scales, fmt, ids, p)
            torch.testing.assert_close(first.float(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
            assert torch.equal(first, again), fmt
            assert int(_split_k.arrival_counters(cpu, 1).abs().sum()) == 0, fmt
        print("ok")
    """)
