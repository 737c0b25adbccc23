"""The logprobs kernels (the chunks' sums and top keys, then each row's merge) compile for an H100/H200
(sm_90) for every logits dtype, on this CPU with Triton's compiler and the ptxas its wheel ships, no
GPU: the interpreter that CI checks their values under never compiles them (see
test_triton_sm90_compile.py for what only compilation sees)."""
from __future__ import annotations

import textwrap

import pytest
from sm90_compile import run_sm90_compile

from anydev.backends.triton_kernels import triton_importable

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")

CHILD = textwrap.dedent("""
    import itertools
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from anydev.backends.triton_kernels import logprobs

    def compile(kernel, signature, constants, warps):
        signature = dict(signature, **{name: "constexpr" for name in constants})
        index = {name: i for i, name in enumerate(kernel.arg_names)}
        source = ASTSource(fn=kernel, signature=signature, constexprs={(index[k],): v for k, v in constants.items()})
        assert triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["cubin"]

    for dtype, size in itertools.product(("*fp32", "*fp16", "*bf16"), (2048, 4096)):   # a GPU's blocks
        chunks = triton.cdiv(151936, size)
        compile(logprobs._chunk_kernel, {"logits_ptr": dtype, "max_ptr": "*fp32", "sum_ptr": "*fp32", "keys_ptr": "*i64",
                                         "V": "i32", "stride": "i32", "chunks": "i32", "k": "i32"},
                dict(BLOCK=size, TOP=logprobs.TOP, USE_PDL=0), warps=logprobs.WARPS)
        compile(logprobs._row_kernel, {"logits_ptr": dtype, "targets_ptr": "*i64", "max_ptr": "*fp32", "sum_ptr": "*fp32",
                                       "keys_ptr": "*i64", "out_ptr": "*fp32", "stride": "i32", "chunks": "i32", "k": "i32"},
                dict(BLOCK_CHUNKS=triton.next_power_of_2(chunks), BLOCK_KEYS=triton.next_power_of_2(chunks * 20),
                     TOP=logprobs.TOP, USE_PDL=0), warps=logprobs.WARPS)
    print("ok")
""")


def test_the_logprobs_kernels_compile_for_sm90_for_every_dtype():
    run_sm90_compile(CHILD)
