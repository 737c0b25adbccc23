"""The linear kernel family compiles for an H100/H200 (sm_90) on this CPU: Triton's own compiler and the
ptxas its wheel ships, no GPU. The interpreter, CI's only run of these kernels, executes their Python and
never compiles them, so it misses what only compilation sees: Triton makes an integer argument equal to 1
a constant (a batch-1 call's ``M``), and a kernel that calls a tensor method on it fails to compile on
every GPU while passing every interpreted test. Each format is compiled at batch 1 with ``M`` that
constant, and at 32 rows on the ``tl.dot`` path, each with K split in 4 (the split-K epilogue); the GGUF
formats also as the integer-dot GEMV with PTX's ``dp4a`` (:mod:`anydev.backends.triton_kernels._int_dot`),
which only compilation runs (as it runs ``q8_0_split``'s float GEMV's codes four a word by ``prmt``), and
the 32-value blocks' integer steps in aligned chunks
(:mod:`anydev.backends.triton_kernels._gguf_int_chunks`) as 128-bit loads. The float batch-1 GEMV is
compiled with programmatic dependent launch (``USE_PDL`` 3,
:data:`~anydev.backends.triton_kernels._common.PDL_ENV`): it must ask the L2 for its first weights, then
wait on ``griddepcontrol``; every other case is compiled without, and must do neither. A 32-row tile of 64
outputs with the weights as the dot's first operand (``Plan.weights_first``) must run sm_90's ``wgmma``:
that is what the operand order is for."""
from __future__ import annotations

import textwrap

import pytest
from sm90_compile import run_sm90_compile

from anydev.backends.triton_kernels import triton_importable

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")

CHILD = textwrap.dedent("""
    import sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from anydev.backends.triton_kernels import linear
    from anydev.backends.triton_kernels._weight_tiles import CODES

    fmt = sys.argv[1]
    weight = {"dense": "*bf16", "int8": "*i8", "fp8_e4m3": "*fp8e4nv"}.get(fmt, "*u8")
    kernel = linear._linear_kernel
    cases = [(1, 16, 256, False, False, False), (32, 64, 256, False, False, False), (32, 64, 256, False, False, True)]
    if fmt in linear.INT_DOT_FORMATS:
        cases.append((1, 32, 512 if fmt == "q6_k" else 256, True, False, False))   # the integer-dot GEMV, dp4a by PTX
    if fmt in linear.INT_CHUNK_FORMATS:
        cases.append((1, 128, 512, True, True, False))                            # two steps of aligned chunks a tile
    for block_m, block_n, block_k, int_dot, chunks, weights_first in cases:
        signature = {"x_ptr": "*bf16", "w_ptr": weight, "scales_ptr": "*fp32", "out_ptr": "*bf16",
                     "partial_ptr": "*fp32", "counters_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32",
                     "stride_xm": "i32", "ROW_BYTES": "i32", "K_PER_SPLIT": "i32"}
        constants = dict(FORMAT=CODES[fmt], CHANNEL_SCALES=fmt in ("int8", "fp8_e4m3"), BLOCK_M=block_m,
                         BLOCK_N=block_n, BLOCK_K=block_k, SLICES=4, PRECISION=None, UPCAST=False,
                         INT_DOT=int_dot, INT_CHUNKS=chunks, ASM=True, WEIGHTS_FIRST=weights_first,   # as on nvidia
                         USE_PDL=3 if (block_m, int_dot) == (1, False) else 0,   # programmatic dependent launch
                         PREFETCH_LINES=4)
        if block_m == 1:
            constants["M"] = 1          # as Triton specializes a batch-1 call
        signature.update({name: "constexpr" for name in constants})
        index = {name: i for i, name in enumerate(kernel.arg_names)}
        # as Triton specializes pointers and multiples of 16 (a row's bytes, the slices' inputs)
        attrs = {(index[name],): [["tt.divisibility", 16]] for name in signature if signature[name] != "constexpr"
                 and name not in ("M", "N", "K", "stride_xm")} if chunks else {}
        source = ASTSource(fn=kernel, signature=signature, constexprs={(index[k],): v for k, v in constants.items()},
                           attrs=attrs)
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        assert compiled.asm["cubin"], (fmt, block_m)
        assert not int_dot or "dp4a.s32.s32" in compiled.asm["ptx"], (fmt, "no dp4a in the integer-dot GEMV")
        assert not chunks or "ld.global.v4.b32" in compiled.asm["ptx"], (fmt, "the aligned chunks not 128-bit loads")
        assert not weights_first or "wgmma.mma_async" in compiled.asm["ptx"], (fmt, "the weights-first tile without wgmma")
        int8_codes = block_m == 1 and not int_dot and fmt in ("int8", "q8_0_split")
        assert not int8_codes or "prmt.b32" in compiled.asm["ptx"], (fmt, "codes not four a word")
        ptx = compiled.asm["ptx"]
        waits = "griddepcontrol.wait" in ptx
        assert waits == bool(constants["USE_PDL"]), (fmt, block_m, "griddepcontrol.wait where USE_PDL asks for it only")
        prefetches = "prefetch.global.L2" in ptx
        assert prefetches == (constants["USE_PDL"] == 3), (fmt, block_m, "an L2 prefetch in mode 3 only")
        assert not prefetches or ptx.index("prefetch.global.L2") < ptx.index("griddepcontrol.wait"), (
            fmt, "the weights' prefetch after the wait")
    print("ok")
""")


@pytest.mark.parametrize("weight_format", ["dense", "int8", "fp8_e4m3", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k", "q8_0_split",
                                           "q6_k_split"])
def test_the_linear_kernel_compiles_for_sm90(weight_format):
    run_sm90_compile(CHILD, weight_format)
