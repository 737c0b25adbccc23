"""The batch-1 integer-dot steps of the 32-value GGUF blocks (``q4_0``, ``q4_1``, ``q8_0``) read in
aligned 16-byte chunks: eight blocks (256 inputs) of a row are 144, 160 and 272 bytes, each a
multiple of 16, so that where ``K`` is a multiple of 256 (a row's bytes too) every step of eight
blocks starts 16-byte aligned and loads as 9, 10 or 17 vector loads of four words a thread, where
a block's own words (at 18, 20 or 34 bytes a block, 4-byte aligned at best) would be one word a
load. A thread holds one row's step: the blocks' words then split out of the chunks in registers
(a block that starts 2 bytes into a word takes each of its words from the two it straddles), and
every block's ``dp4a`` chain runs in that thread, the eight blocks' scaled sums added there.

The activations of a step are rounded to int8 once for all of the program's rows (:mod:`._int_dot`),
their words split out per block to broadcast over the rows. Same arithmetic, partial sums and
layouts as the word steps of :mod:`._gguf_int_gemv` (``plugin_api.weight_formats``)."""
from __future__ import annotations

from ._common import tl, triton
from ._gguf_int_gemv import _f16_bits, _q4_0_dots, _straddled, _words4
from ._int_dot import NIBBLES, dp4a, quantized_pairs, quantized_rows

#: Bytes of eight blocks (one step) of ``q8_0`` (3), ``q4_0`` (4), ``q4_1`` (5).
STEP_BYTES = {3: 272, 4: 144, 5: 160}


@triton.jit
def _split4(v):
    """``v`` ``[A, B, 4]`` as its four ``[A, B]`` (the last axis is one thread's: no data moves)."""
    A: tl.constexpr = v.shape[0]
    B: tl.constexpr = v.shape[1]
    low, high = tl.split(tl.reshape(v, (A, B, 2, 2)))                                 # words 2c + e: e split
    w0, w2 = tl.split(low)
    w1, w3 = tl.split(high)
    return w0, w1, w2, w3


@triton.jit
def _chunks(words, valid, COUNT: tl.constexpr):
    """The ``COUNT`` 16-byte chunks from int32 ``words`` ``[BLOCK_N, QUADS]``: the tuple of their ``4 *
    COUNT`` words, each ``[BLOCK_N, QUADS]``."""
    lanes = tl.arange(0, 4)[None, None, :]
    mask = valid[:, :, None]
    out = ()
    for c in tl.static_range(COUNT):
        out = out + _split4(tl.load(words[:, :, None] + 4 * c + lanes, mask=mask, other=0))
    return out


@triton.jit
def _word(chunks, j: tl.constexpr):
    """Word ``j`` of a step's chunks (:func:`_chunks`)."""
    return chunks[j]


@triton.jit
def _eighths(v):
    """``v`` ``[8 * Q, C]`` (rows ``8q + b``) as the tuple of its eight ``[Q, C]`` (``b`` = 0 .. 7)."""
    Q: tl.constexpr = v.shape[0] // 8
    C: tl.constexpr = v.shape[1]
    t = tl.permute(tl.reshape(v, (Q, 2, 2, 2, C)), (0, 4, 1, 2, 3))                  # [Q, C, b // 4, b // 2 % 2, b % 2]
    even, odd = tl.split(t)
    b0, b4 = tl.split(tl.split(even)[0])
    b2, b6 = tl.split(tl.split(even)[1])
    b1, b5 = tl.split(tl.split(odd)[0])
    b3, b7 = tl.split(tl.split(odd)[1])
    return b0, b1, b2, b3, b4, b5, b6, b7


@triton.jit
def _eighths_of(v):
    """``v`` ``[8 * Q]`` (entries ``8q + b``) as the tuple of its eight ``[Q]``."""
    Q: tl.constexpr = v.shape[0] // 8
    b0, b1, b2, b3, b4, b5, b6, b7 = _eighths(v[:, None])
    return (tl.reshape(b0, (Q,)), tl.reshape(b1, (Q,)), tl.reshape(b2, (Q,)), tl.reshape(b3, (Q,)),
            tl.reshape(b4, (Q,)), tl.reshape(b5, (Q,)), tl.reshape(b6, (Q,)), tl.reshape(b7, (Q,)))


@triton.jit
def _split8(v):
    """``v`` ``[Q, 8]`` as its eight ``[Q]`` (columns in order)."""
    Q: tl.constexpr = v.shape[0]
    low, high = tl.split(tl.permute(tl.reshape(v, (Q, 2, 4)), (0, 2, 1)))            # columns 0-3, 4-7
    return _words4(low) + _words4(high)


@triton.jit
def _steps(w_ptr, n, kq, N, K, ROW_BYTES, STEP: tl.constexpr, QUADS: tl.constexpr):
    """The int32 addresses ``[BLOCK_N, QUADS]`` of steps ``kq ..`` of rows ``n`` (``STEP`` bytes each),
    their mask (0 past ``N`` and ``K``) and the steps' first blocks ``[8 * QUADS]``."""
    q = kq + tl.arange(0, QUADS)
    valid = (n < N)[:, None] & (q * 256 < K)[None, :]
    words = (w_ptr + n[:, None] * ROW_BYTES + q[None, :] * STEP).to(tl.pointer_type(tl.int32))
    return words, valid, kq * 8 + tl.arange(0, 8 * QUADS)


@triton.jit
def _halves(x_ptr, blk, K):
    """The inputs of blocks ``blk`` as their halves ``[blocks, 16]`` (values 0-15, 16-31), float32."""
    inputs = blk[:, None] * 32 + tl.arange(0, 16)[None, :]
    x_low = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    x_high = tl.load(x_ptr + inputs + 16, mask=inputs + 16 < K, other=0.0).to(tl.float32)
    return x_low, x_high


@triton.jit
def q4_0_int_chunks(w_ptr, x_ptr, n, kq, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, QUADS: tl.constexpr,
                    ASM: tl.constexpr):
    """Steps ``kq .. kq + QUADS - 1`` (eight ``q4_0`` blocks, 144 bytes, each) of rows ``n`` times the
    inputs, ``[BLOCK_N, QUADS]`` sums. Pair ``p`` of a step is its words ``9p .. 9p + 8`` (as
    :func:`._gguf_int_gemv.q4_0_int_gemv`'s pair); a value is its nibble minus 8."""
    words, valid, blk = _steps(w_ptr, n, kq, N, K, ROW_BYTES, 144, QUADS)
    chunks = _chunks(words, valid, 9)
    x_low, x_high = _halves(x_ptr, blk, K)
    xw_low, xw_high, dx, code_sums = quantized_pairs(x_low, x_high)                  # [8Q, 4] x 2, [8Q] x 2
    lows, highs = _eighths(xw_low), _eighths(xw_high)
    scales, sums = _eighths_of(dx), _eighths_of(code_sums)
    total = tl.zeros((BLOCK_N, QUADS), dtype=tl.float32)
    for b in tl.static_range(8):
        d, dots = _q4_0_block(chunks, lows[b], highs[b], b, ASM)
        total += d * scales[b][None, :] * (dots - 8 * sums[b][None, :]).to(tl.float32)
    return total


@triton.jit
def _q4_0_block(chunks, x_low, x_high, b: tl.constexpr, ASM: tl.constexpr):
    """Block ``b`` of a ``q4_0`` step's words (:func:`_chunks`): its ``d`` and the ``dp4a`` sum of its
    nibbles with the activations' words ``x_low``, ``x_high`` ``[Q, 4]``. The even block of pair ``p``
    starts 2 bytes into word ``9p`` (``d`` its low half), the odd one at the high half of word ``9p + 4``."""
    first: tl.constexpr = 9 * (b // 2)
    if b % 2 == 0:
        d = _f16_bits(_word(chunks, first))
        dots = _q4_0_dots(_straddled(_word(chunks, first), _word(chunks, first + 1)),
                          _straddled(_word(chunks, first + 1), _word(chunks, first + 2)),
                          _straddled(_word(chunks, first + 2), _word(chunks, first + 3)),
                          _straddled(_word(chunks, first + 3), _word(chunks, first + 4)), x_low, x_high, ASM)
    else:
        d = _f16_bits(_word(chunks, first + 4) >> 16)
        dots = _q4_0_dots(_word(chunks, first + 5), _word(chunks, first + 6), _word(chunks, first + 7),
                          _word(chunks, first + 8), x_low, x_high, ASM)
    return d, dots


@triton.jit
def q4_1_int_chunks(w_ptr, x_ptr, n, kq, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, QUADS: tl.constexpr,
                    ASM: tl.constexpr):
    """Steps ``kq ..`` (eight ``q4_1`` blocks, 160 bytes, each) of rows ``n`` times the inputs,
    ``[BLOCK_N, QUADS]`` sums. Block ``b`` is words ``5b .. 5b + 4``: ``d`` and ``m`` (low and high half
    of the first), then its nibbles (as :func:`._gguf_int_gemv.q4_1_int_gemv`'s); a value is ``d q + m``."""
    words, valid, blk = _steps(w_ptr, n, kq, N, K, ROW_BYTES, 160, QUADS)
    chunks = _chunks(words, valid, 10)
    x_low, x_high = _halves(x_ptr, blk, K)
    xw_low, xw_high, dx, _ = quantized_pairs(x_low, x_high)
    lows, highs = _eighths(xw_low), _eighths(xw_high)
    scales = _eighths_of(dx)
    x_sums = _eighths_of(tl.sum(x_low, axis=1) + tl.sum(x_high, axis=1))
    total = tl.zeros((BLOCK_N, QUADS), dtype=tl.float32)
    for b in tl.static_range(8):
        header = _word(chunks, 5 * b)
        dots = _q4_0_dots(_word(chunks, 5 * b + 1), _word(chunks, 5 * b + 2), _word(chunks, 5 * b + 3),
                          _word(chunks, 5 * b + 4), lows[b], highs[b], ASM)
        total += _f16_bits(header) * scales[b][None, :] * dots.to(tl.float32) \
            + _f16_bits(header >> 16) * x_sums[b][None, :]
    return total


@triton.jit
def q8_0_int_chunks(w_ptr, x_ptr, n, kq, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, QUADS: tl.constexpr,
                    ASM: tl.constexpr):
    """Steps ``kq ..`` (eight ``q8_0`` blocks, 272 bytes, each) of rows ``n`` times the inputs,
    ``[BLOCK_N, QUADS]`` sums. Pair ``p`` of a step is its words ``17p .. 17p + 16`` (as
    :func:`._gguf_int_gemv.q8_0_int_gemv`'s pair)."""
    words, valid, blk = _steps(w_ptr, n, kq, N, K, ROW_BYTES, 272, QUADS)
    chunks = _chunks(words, valid, 17)
    inputs = blk[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    xw, dx = quantized_rows(x)                                                        # [8Q, 8], [8Q]
    blocks, scales = _eighths(xw), _eighths_of(dx)
    total = tl.zeros((BLOCK_N, QUADS), dtype=tl.float32)
    for b in tl.static_range(8):
        d, dots = _q8_0_block(chunks, _split8(blocks[b]), b, BLOCK_N, QUADS, ASM)
        total += d * scales[b][None, :] * dots.to(tl.float32)
    return total


@triton.jit
def _q8_0_block(chunks, xs, b: tl.constexpr, BLOCK_N: tl.constexpr, QUADS: tl.constexpr, ASM: tl.constexpr):
    """Block ``b`` of a ``q8_0`` step's words (:func:`_chunks`): its ``d`` and the ``dp4a`` sum of its
    codes with the activations' eight words ``xs`` (each ``[Q]``). The even block of pair ``p`` starts 2
    bytes into word ``17p`` (``d`` its low half), the odd one at the high half of word ``17p + 8``."""
    first: tl.constexpr = 17 * (b // 2)
    dots = tl.zeros((BLOCK_N, QUADS), dtype=tl.int32)
    if b % 2 == 0:
        d = _f16_bits(_word(chunks, first))
        for i in tl.static_range(8):
            dots = dp4a(_straddled(_word(chunks, first + i), _word(chunks, first + i + 1)), xs[i][None, :], dots, ASM)
    else:
        d = _f16_bits(_word(chunks, first + 8) >> 16)
        for i in tl.static_range(8):
            dots = dp4a(_word(chunks, first + 9 + i), xs[i][None, :], dots, ASM)
    return d, dots
