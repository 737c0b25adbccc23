"""The GGUF tiles of more than one row (``tl.dot``) on int8 activations: each 32-value block's codes
multiplied as int8 by the activations rounded to int8 (one scale per row and 32 inputs, as
:mod:`._int_dot` rounds them at batch 1), on the int8 tensor cores, each block's int32 products then
scaled by both scales and added up in float32 (llama.cpp's ``mmq`` scheme). ``q4_k``'s 4-bit codes
(0-15, each 32 of a sub-block with its own scale and min) multiply the same way; a sub-block's min
is subtracted once, times the sum of its float activations.

The float tiles (:mod:`._gguf_tiles`) convert every weight to the activations' dtype and multiply it by
its block's scale before the dot: several instructions a value, which at batch 32 bound the tile
below the memory's rate. Here a weight is loaded and multiplied as stored; the scaling is per block
of 32 products. The rounding costs what it costs at batch 1 (about half a percent of an output's
typical magnitude: bfloat16 activations only)."""
from __future__ import annotations

from ._common import tl, triton
from ._gguf_tiles import q4_k_super_block
from ._int_dot import block_scales, int8_codes
from ._weight_tiles import f16


@triton.jit
def _rounded(x_ptr, m, inputs, M, K, stride_xm):
    """The activations of rows ``m`` at ``inputs`` ``[G, 1, 32]`` rounded to int8 a row and 32 at a
    time: (codes int8 ``[G, BLOCK_M, 32]``, scales ``[G, BLOCK_M]``, the float sums ``[G, BLOCK_M]``)."""
    x = tl.load(x_ptr + m[None, :, None] * stride_xm + inputs, mask=(m < M)[None, :, None] & (inputs < K),
                other=0.0).to(tl.float32)
    scale, inverse = block_scales(tl.max(tl.abs(x), axis=2))
    return int8_codes(x, inverse[:, :, None]).to(tl.int8), scale, tl.sum(x, axis=2)


@triton.jit
def q8_0_int8_tile(w_ptr, x_ptr, m, n, k0, M, N, K, stride_xm, ROW_BYTES, BLOCKS: tl.constexpr):
    """The ``BLOCKS`` ``q8_0`` blocks from input ``k0`` of rows ``n`` times the activations of rows
    ``m``, a float32 ``[BLOCK_M, BLOCK_N]`` partial sum; 0 past ``M``, ``N`` and ``K``. One batched
    ``tl.dot`` over the blocks: activations ``[BLOCKS, BLOCK_M, 32]`` int8 by codes ``[BLOCKS, 32,
    BLOCK_N]`` int8, each block's int32 products times its weight scale ``d`` and activation scale."""
    blk = k0 // 32 + tl.arange(0, BLOCKS)
    j = tl.arange(0, 32)
    x_codes, x_scale, _ = _rounded(x_ptr, m, blk[:, None, None] * 32 + j[None, None, :], M, K, stride_xm)
    valid = (blk * 32 < K)[:, None] & (n < N)[None, :]                                # [BLOCKS, BLOCK_N]
    at = blk[:, None] * 34 + n[None, :] * ROW_BYTES
    codes = tl.load(w_ptr + at[:, None, :] + 2 + j[None, :, None], mask=valid[:, None, :], other=0)
    dots = tl.dot(x_codes, codes.to(tl.int8, bitcast=True), out_dtype=tl.int32)       # [BLOCKS, BLOCK_M, BLOCK_N]
    scales = x_scale[:, :, None] * f16(w_ptr, at, valid)[:, None, :]
    return tl.sum(dots.to(tl.float32) * scales, axis=0)


@triton.jit
def q4_k_int8_tile(w_ptr, x_ptr, m, n, kb, M, N, K, stride_xm, ROW_BYTES):
    """Super-block ``kb`` of ``q4_k`` rows ``n`` times the activations of rows ``m``, a float32
    ``[BLOCK_M, BLOCK_N]`` partial sum. Pair ``p`` of its sub-blocks is bytes ``32p ..`` of the codes:
    sub-block ``2p`` their low nibbles (inputs ``64p ..``), ``2p + 1`` their high ones (``64p + 32 ..``);
    each half is one batched int8 ``tl.dot`` over the four pairs, its products times ``d * scale *``
    the activations' scale, less ``dmin * min *`` the activations' sum."""
    q, d, dmin, sc_low, m_low, sc_high, m_high = q4_k_super_block(w_ptr, n, kb, n < N, ROW_BYTES)   # q [BLOCK_N, 4, 32]
    codes = tl.permute(q, (1, 2, 0))                                                  # [4, 32, BLOCK_N]
    first = kb * 256 + (64 * tl.arange(0, 4))[:, None, None] + tl.arange(0, 32)[None, None, :]     # [4, 1, 32]
    return _q4_k_half(x_ptr, m, first, M, K, stride_xm, codes & 15, d * sc_low, dmin * m_low) \
        + _q4_k_half(x_ptr, m, first + 32, M, K, stride_xm, codes >> 4, d * sc_high, dmin * m_high)


@triton.jit
def _q4_k_half(x_ptr, m, inputs, M, K, stride_xm, codes, scales, mins):
    """One half of :func:`q4_k_int8_tile`: the sub-blocks of ``codes`` ``[4, 32, BLOCK_N]`` (0-15) at
    ``inputs`` ``[4, 1, 32]``, with their ``scales`` and ``mins`` (``d`` and ``dmin`` applied) ``[BLOCK_N,
    4]``, summed into ``[BLOCK_M, BLOCK_N]``."""
    x_codes, dx, x_sums = _rounded(x_ptr, m, inputs, M, K, stride_xm)
    dots = tl.dot(x_codes, codes.to(tl.int8), out_dtype=tl.int32).to(tl.float32)    # [4, BLOCK_M, BLOCK_N]
    return tl.sum(dx[:, :, None] * tl.trans(scales)[:, None, :] * dots
                  - x_sums[:, :, None] * tl.trans(mins)[:, None, :], axis=0)
