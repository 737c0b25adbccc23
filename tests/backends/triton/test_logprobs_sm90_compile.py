"""The logprobs kernel (the chunks' sums and top keys, and the last chunk's merge of a row) compiles for
an H100/H200 (sm_90) for every logits dtype and a GPU's blocks, on this CPU with Triton's compiler and
the ptxas its wheel ships, no GPU: the interpreter that CI checks its values under never compiles it
(see test_triton_sm90_compile.py for what only compilation sees)."""
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

    kernel = logprobs._logprobs_kernel
    index = {name: i for i, name in enumerate(kernel.arg_names)}
    for dtype, size in itertools.product(("*fp32", "*fp16", "*bf16"), (2048, 4096)):
        chunks = triton.cdiv(151936, size)
        constants = dict(BLOCK=size, BLOCK_CHUNKS=triton.next_power_of_2(chunks),
                         BLOCK_KEYS=triton.next_power_of_2(chunks * 20), TOP=logprobs.TOP, USE_PDL=0)
        signature = {"logits_ptr": dtype, "targets_ptr": "*i64", "scratch_ptr": "*i64", "counters_ptr": "*i32",
                     "out_ptr": "*fp32", "V": "i32", "stride": "i32", "chunks": "i32", "k": "i32",
                     **{name: "constexpr" for name in constants}}
        source = ASTSource(fn=kernel, signature=signature, constexprs={(index[n],): v for n, v in constants.items()})
        assert triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": logprobs.WARPS}).asm["cubin"]
    print("ok")
""")


def test_the_logprobs_kernel_compiles_for_sm90_for_every_dtype():
    run_sm90_compile(CHILD)
