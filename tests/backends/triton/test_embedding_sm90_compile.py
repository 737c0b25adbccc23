"""The quantized_embedding kernel compiles for an H100/H200 (sm_90) in every weight format, on this CPU
with Triton's compiler and the ptxas its wheel ships, no GPU: the interpreter that CI checks its values
under never compiles it (see test_triton_sm90_compile.py for what only compilation sees)."""
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
    from anydev.backends.triton_kernels import embedding
    from anydev.backends.triton_kernels._weight_tiles import CODES
    from anydev.plugin_api.weight_formats import SPLIT_FORMATS

    kernel = embedding._embedding_kernel
    index = {name: i for i, name in enumerate(kernel.arg_names)}
    for fmt, code in CODES.items():
        if fmt == "dense" or fmt in SPLIT_FORMATS:     # (the embedding's offer does not name them)
            continue
        weight = {"int8": "*i8", "fp8_e4m3": "*fp8e4nv"}.get(fmt, "*u8")
        for out in ("*bf16", "*fp32"):
            signature = {"ids_ptr": "*i64", "w_ptr": weight, "scales_ptr": "*fp32", "out_ptr": out, "N": "i32",
                         "K": "i32", "ROW_BYTES": "i32", "FORMAT": "constexpr"}
            source = ASTSource(fn=kernel, signature=signature, constexprs={(index["FORMAT"],): code})
            assert triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["cubin"], fmt
    print("ok")
""")


def test_the_embedding_kernel_compiles_for_sm90_in_every_format():
    run_sm90_compile(CHILD)
