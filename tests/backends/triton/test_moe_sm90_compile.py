"""The MoE kernels (moe_route, moe_linear's GEMV (unsplit and split-K) and grouped tl.dot kernels in every weight format, moe_combine) compile for an H100/H200 (sm_90) on
this CPU, with Triton's compiler and the ptxas its wheel ships, no GPU: the interpreter that CI runs
them under never compiles them (see test_triton_sm90_compile.py for what only compilation sees)."""
from __future__ import annotations

import textwrap

import pytest
from sm90_compile import run_sm90_compile

from anydev.backends.triton_kernels import triton_importable

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")

CHILD = textwrap.dedent("""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from anydev.backends.triton_kernels import moe
    from anydev.backends.triton_kernels._weight_tiles import CODES

    def compile(kernel, signature, constants, warps=4):
        signature = dict(signature, **{name: "constexpr" for name in constants})
        index = {name: i for i, name in enumerate(kernel.arg_names)}
        source = ASTSource(fn=kernel, signature=signature, constexprs={(index[k],): v for k, v in constants.items()})
        assert triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["cubin"]

    for renormalize in (False, True):
        compile(moe._route_kernel, {"logits_ptr": "*bf16", "weights_ptr": "*fp32", "ids_ptr": "*i64", "E": "i32"},
                dict(TOP_K=8, RENORMALIZE=renormalize, BLOCK_E=128, BLOCK_TOP=8), warps=moe.ROUTE_WARPS)
    blocks = {"q4_k": (32, 256), "q6_k": (32, 256), "q8_0": (32, 128), "q4_0": (32, 128), "q4_1": (32, 128)}
    for fmt, code in CODES.items():
        weight = {"dense": "*bf16", "int8": "*i8", "fp8_e4m3": "*fp8e4nv"}.get(fmt, "*u8")
        block_n, block_k = blocks.get(fmt, (16, 256))
        for slices in (1, 2):           # split-K stores through the partial sums and arrival counters
            compile(moe._moe_linear_kernel,
                    {"x_ptr": "*bf16", "w_ptr": weight, "scales_ptr": "*fp32", "ids_ptr": "*i64", "out_ptr": "*bf16",
                     "partial_ptr": "*fp32", "counters_ptr": "*i32", "R": "i32", "N": "i32", "K": "i32",
                     "stride_x": "i32", "ROW_BYTES": "i32", "K_PER_SPLIT": "i32"},
                    dict(FORMAT=code, CHANNEL_SCALES=fmt in ("int8", "fp8_e4m3"), BLOCK_N=block_n, BLOCK_K=block_k,
                         SLICES=slices))
        dot_n, dot_k = (32, 256) if fmt in ("q4_k", "q6_k") else (64, 64)
        compile(moe._moe_linear_dot_kernel,
                {"x_ptr": "*bf16", "w_ptr": weight, "scales_ptr": "*fp32", "sorted_ids_ptr": "*i64", "order_ptr": "*i64",
                 "out_ptr": "*bf16", "R": "i32", "N": "i32", "K": "i32", "stride_x": "i32", "ROW_BYTES": "i32"},
                dict(FORMAT=code, CHANNEL_SCALES=fmt in ("int8", "fp8_e4m3"), BLOCK_M=16, BLOCK_N=dot_n,
                     BLOCK_K=dot_k, PRECISION=None, UPCAST=False))
    for dtype, top_k in (("*bf16", 8), ("*fp16", 2), ("*fp32", 1)):
        compile(moe._combine_kernel, {"rows_ptr": dtype, "weights_ptr": "*fp32", "out_ptr": dtype, "N": "i32",
                                      "stride": "i32"}, dict(TOP_K=top_k, BLOCK=moe.COMBINE_BLOCK, USE_PDL=0))
    print("ok")
""")


def test_the_moe_kernels_compile_for_sm90():
    run_sm90_compile(CHILD)
