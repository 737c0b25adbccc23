"""The GGUF tiles of more than one row (``tl.dot``) on int8 activations: each 32-value block's codes
multiplied as int8 by the activations rounded to int8 (one scale per row and 32 inputs, as
:mod:`._int_dot` rounds them at batch 1), on the int8 tensor cores, each block's int32 products then
scaled by both scales and added up in float32 (llama.cpp's ``mmq`` scheme).

The float tiles (:mod:`._gguf_tiles`) convert every weight to the activations' dtype and multiply it by
its block's scale before the dot: several instructions a value, which at batch 32 bound the tile
below the memory's rate. Here a weight is loaded and multiplied as stored; the scaling is per block
of 32 products. The rounding costs what it costs at batch 1 (about half a percent of an output's
typical magnitude: bfloat16 activations only)."""
from __future__ import annotations

from ._common import tl, triton
from ._int_dot import block_scales, int8_codes
from ._weight_tiles import f16


@triton.jit
def q8_0_int8_tile(w_ptr, x_ptr, m, n, k0, M, N, K, stride_xm, ROW_BYTES, BLOCKS: tl.constexpr):
    """The ``BLOCKS`` ``q8_0`` blocks from input ``k0`` of rows ``n`` times the activations of rows
    ``m``, a float32 ``[BLOCK_M, BLOCK_N]`` partial sum; 0 past ``M``, ``N`` and ``K``. One batched
    ``tl.dot`` over the blocks: activations ``[BLOCKS, BLOCK_M, 32]`` int8 by codes ``[BLOCKS, 32,
    BLOCK_N]`` int8, each block's int32 products times its weight scale ``d`` and activation scale."""
    blk = k0 // 32 + tl.arange(0, BLOCKS)
    j = tl.arange(0, 32)
    inputs = blk[:, None, None] * 32 + j[None, None, :]                                # [BLOCKS, 1, 32]
    x = tl.load(x_ptr + m[None, :, None] * stride_xm + inputs, mask=(m < M)[None, :, None] & (inputs < K),
                other=0.0).to(tl.float32)                                             # [BLOCKS, BLOCK_M, 32]
    x_scale, inverse = block_scales(tl.max(tl.abs(x), axis=2))                        # [BLOCKS, BLOCK_M]
    x_codes = int8_codes(x, inverse[:, :, None]).to(tl.int8)
    valid = (blk * 32 < K)[:, None] & (n < N)[None, :]                                # [BLOCKS, BLOCK_N]
    at = blk[:, None] * 34 + n[None, :] * ROW_BYTES
    codes = tl.load(w_ptr + at[:, None, :] + 2 + j[None, :, None], mask=valid[:, None, :], other=0)
    dots = tl.dot(x_codes, codes.to(tl.int8, bitcast=True), out_dtype=tl.int32)       # [BLOCKS, BLOCK_M, BLOCK_N]
    scales = x_scale[:, :, None] * f16(w_ptr, at, valid)[:, None, :]
    return tl.sum(dots.to(tl.float32) * scales, axis=0)
