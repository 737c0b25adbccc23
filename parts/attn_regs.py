"""Session 33: the split decode-attention kernel compiled for sm_90 with the Triton at hand (no GPU
needed), its registers and local-memory spills (LDL/STL in the SASS) for each warps x whole-path tile
keys x head width: whether a configuration that attn_cold.py times spills with the device's Triton.

    python parts/attn_regs.py
"""
from __future__ import annotations

import itertools
import re

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from anydev.backends.triton_kernels import attention_decode

kernel = attention_decode._decode_kernel
index = {name: i for i, name in enumerate(kernel.arg_names)}
signature = {name: "i32" for name in kernel.arg_names}
signature.update(q_ptr="*bf16", k_cache_ptr="*bf16", v_cache_ptr="*bf16", tables_ptr="*i32", lens_ptr="*i32",
                 out_ptr="*bf16", part_out_ptr="*fp32", part_lse_ptr="*fp32", counters_ptr="*i32", qk_scale="fp32")
# WHOLE_BLOCK_N: a tree whose whole-sequence path has tiles of their own (session 33's patch); else 64.
tiles = (64, 128, 256) if "WHOLE_BLOCK_N" in index else (attention_decode.BLOCK_N,)
for warps, tile, head_dim in itertools.product((4, 8, 16), tiles, (128, 64)):
    constants = dict(GROUP=4, GROUP_PAD=16, D=head_dim, BLOCK_SIZE=16, BLOCK_N=attention_decode.BLOCK_N, SPLIT=True,
                     PRECISION=None, UPCAST=False, GROUP_P2=4, SPLITS_PAD=attention_decode.MAX_SPLITS,
                     WHOLE_KEYS=attention_decode.WHOLE_KEYS_PER_DIM, USE_PDL=3)
    if "WHOLE_BLOCK_N" in index:
        constants["WHOLE_BLOCK_N"] = tile
    source = ASTSource(fn=kernel, signature={**signature, **{n: "constexpr" for n in constants}},
                       constexprs={(index[n],): v for n, v in constants.items()})
    sass = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "num_stages": 2}).asm["sass"]
    regs = max(map(int, re.findall(r"\bR(\d+)\b", sass))) + 1
    print(f"warps {warps:2d} whole tile {tile:3d} d {head_dim:3d}: registers {regs:3d}, "
          f"LDL {sass.count('LDL'):4d} STL {sass.count('STL'):4d}", flush=True)
