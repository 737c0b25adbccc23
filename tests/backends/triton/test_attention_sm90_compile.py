"""Decode attention's split launch of one wave (batch 1) compiles for an H100/H200 (sm_90) without
spilling: at ``attention_decode.ONE_WAVE_WARPS`` warps its programs keep the key and value tiles and
the merge of the partitions in registers (no ``LDL``/``STL``, local memory, in the SASS) for the query
groups and head sizes of the Llama and Qwen3 shapes, with programmatic dependent launch. On this CPU
with Triton's compiler and the ptxas its wheel ships, no GPU (the interpreter never compiles). The
warps are chosen by the launch's size: 8 for one program a multiprocessor at most, 4 above."""
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
    from anydev.backends.triton_kernels import attention_decode

    kernel = attention_decode._decode_kernel
    index = {name: i for i, name in enumerate(kernel.arg_names)}
    signature = {name: "i32" for name in kernel.arg_names}
    signature.update(q_ptr="*bf16", k_cache_ptr="*bf16", v_cache_ptr="*bf16", tables_ptr="*i32", lens_ptr="*i32",
                     out_ptr="*bf16", part_out_ptr="*fp32", part_lse_ptr="*fp32", counters_ptr="*i32", qk_scale="fp32")
    for group, head_dim in ((4, 128), (8, 128), (4, 64)):       # Llama-3-8B, Qwen3-30B-A3B, Llama-3.2-1B
        constants = dict(GROUP=group, GROUP_PAD=16, D=head_dim, BLOCK_SIZE=16, BLOCK_N=attention_decode.BLOCK_N,
                         SPLIT=True, PRECISION=None, UPCAST=False, GROUP_P2=group,
                         SPLITS_PAD=attention_decode.MAX_SPLITS, USE_PDL=3)
        source = ASTSource(fn=kernel, signature={**signature, **{n: "constexpr" for n in constants}},
                           constexprs={(index[n],): v for n, v in constants.items()})
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": attention_decode.ONE_WAVE_WARPS, "num_stages": 2})
        sass = compiled.asm["sass"]
        assert "griddepcontrol" in compiled.asm["ptx"], (group, head_dim, "no programmatic dependent launch")
        assert "LDL" not in sass and "STL" not in sass, (group, head_dim, "the split decode kernel spills")
    print("ok")
""")


def test_the_split_decode_kernel_compiles_for_sm90_without_spilling():
    run_sm90_compile(CHILD)


def test_only_a_split_launch_of_one_wave_takes_more_warps(monkeypatch):
    import torch

    from anydev.backends.triton_kernels import attention_decode

    monkeypatch.setattr(attention_decode, "programs_to_fill", lambda device: 4 * 132)     # an H100's 132
    cuda = torch.device("cuda", 0)
    one_wave = attention_decode.ONE_WAVE_WARPS
    assert attention_decode.decode_warps(8 * 16, 16, cuda) == one_wave       # batch 1: 8 KV heads x 16 partitions
    assert attention_decode.decode_warps(132, 2, cuda) == one_wave
    assert attention_decode.decode_warps(32 * 8 * 3, 3, cuda) == 4          # batch 32: 768 programs
    assert attention_decode.decode_warps(8, 1, cuda) == 4                    # unsplit
