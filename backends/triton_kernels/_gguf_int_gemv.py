"""The GGUF GEMV steps at batch 1 on int8 activations (:mod:`._int_dot`): the weights' codes read as
words of four bytes, multiplied by the activations' codes with ``dp4a``, each block's integer sum
scaled once. Same steps and partial sums as the float GEMVs of :mod:`._gguf_tiles` (layouts:
:mod:`anydev.plugin_api.weight_formats`).

Word loads: ``q4_k``'s nibbles (at byte 16 of a 144-byte super-block) and ``q4_1``'s (byte 4 of a
20-byte block) are 4-byte aligned. ``q8_0``'s 34-byte and ``q4_0``'s 18-byte blocks, and ``q6_k``'s
210-byte super-blocks, are only 2-byte aligned one by one but 4-byte aligned two by two (where a row
holds an even number of them): those steps take an aligned pair, the odd one's words each from the
two words it straddles. The steps of ``q4_0`` and ``q6_k`` issue their weight loads before the
activations' rounding (whose reductions and layout change wait at a barrier), so that the loads are
in flight meanwhile."""
from __future__ import annotations

from ._common import tl, triton
from ._gguf_tiles import q4_k_scale_min
from ._int_dot import NIBBLES, dp4a, pack4, quantized_pairs, quantized_rows, row_codes
from ._weight_tiles import f16

#: The two high bits of each byte's 6-bit ``q6_k`` code, in place (bits 4-5 of every byte).
_HIGH_BITS = tl.constexpr(0x30303030)


@triton.jit
def _dots(words, x_words, AXIS: tl.constexpr, ASM: tl.constexpr):
    """``dp4a`` of each weight word with its activation word (broadcast), summed over axis ``AXIS``
    (the last)."""
    return tl.sum(dp4a(words, x_words, tl.zeros_like(words), ASM), axis=AXIS)


@triton.jit
def _chained(a, x_a, b, x_b, ASM: tl.constexpr):
    """``dp4a(b, x_b, dp4a(a, x_a, 0))`` elementwise (two words of one scale, one integer sum)."""
    return dp4a(b, x_b, dp4a(a, x_a, tl.zeros_like(a), ASM), ASM)


@triton.jit
def q4_k_int_block(w_ptr, x_ptr, n, kb, N, ROW_BYTES, BLOCK_N: tl.constexpr, ASM: tl.constexpr):
    """Super-block ``kb`` of ``q4_k`` rows as ``[BLOCK_N, 4]`` sums (as ``q4_k_gemv_block``): word ``8p + j``
    of the nibbles holds values ``64p + 4j ..`` in its low nibbles and ``64p + 32 + 4j ..`` in its high
    ones; each sub-block of 32 inputs has its own activation scale."""
    inputs = kb * 256 + (64 * tl.arange(0, 4))[:, None] + tl.arange(0, 32)[None, :]   # [4, 32]: the low nibbles'
    x_low = tl.load(x_ptr + inputs).to(tl.float32)
    x_high = tl.load(x_ptr + inputs + 32).to(tl.float32)
    xw_low, dx_low = quantized_rows(x_low)                                        # [4, 8], [4]
    xw_high, dx_high = quantized_rows(x_high)
    valid = n < N
    base = n * ROW_BYTES + kb * 144
    words = (w_ptr + base + 16).to(tl.pointer_type(tl.int32))
    at = (8 * tl.arange(0, 4))[:, None] + tl.arange(0, 8)[None, :]
    q = tl.load(words[:, None, None] + at[None, :, :], mask=valid[:, None, None], other=0)   # [BLOCK_N, 4, 8]
    low = _dots(q & NIBBLES, xw_low[None, :, :], 2, ASM).to(tl.float32)                  # [BLOCK_N, 4]
    high = _dots((q >> 4) & NIBBLES, xw_high[None, :, :], 2, ASM).to(tl.float32)
    d, dmin, sc_low, m_low, sc_high, m_high = _q4_k_header_words(w_ptr, base, valid)
    mins = m_low * tl.sum(x_low, axis=1)[None, :] + m_high * tl.sum(x_high, axis=1)[None, :]
    return d * (sc_low * dx_low[None, :] * low + sc_high * dx_high[None, :] * high) - dmin * mins


@triton.jit
def q8_0_int_gemv(w_ptr, x_ptr, n, k0, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, PAIRS: tl.constexpr,
                  ASM: tl.constexpr):
    """The ``2 * PAIRS`` ``q8_0`` blocks from input ``k0`` (a multiple of 64; ``K`` too, so that a row
    and a pair of 34-byte blocks start 4-byte aligned) of rows ``n`` times the inputs, ``[BLOCK_N, PAIRS,
    8]`` partial sums (the caller adds them up after its loop: summing a step's words would move data
    between threads). A pair is 17 words: the even block's ``d`` in the low half of word 0, its codes
    from the high half of word 0 to the low half of word 8; the odd block's ``d`` in the high half of
    word 8, its codes words 9-16."""
    pair = k0 // 64 + tl.arange(0, PAIRS)
    inputs = pair[:, None] * 64 + tl.arange(0, 32)[None, :]                          # [PAIRS, 32]
    x_even = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    x_odd = tl.load(x_ptr + inputs + 32, mask=inputs + 32 < K, other=0.0).to(tl.float32)
    xw_even, dx_even = quantized_rows(x_even)                                        # [PAIRS, 8], [PAIRS]
    xw_odd, dx_odd = quantized_rows(x_odd)
    valid = (n[:, None] < N) & (pair * 64 < K)[None, :]                              # [BLOCK_N, PAIRS]
    at = n[:, None] * ROW_BYTES + pair[None, :] * 68
    words = (w_ptr + at).to(tl.pointer_type(tl.int32))[:, :, None]
    i = tl.arange(0, 8)[None, None, :]
    mask = valid[:, :, None]
    even = ((tl.load(words + i, mask=mask, other=0) >> 16) & 0xFFFF) | (tl.load(words + i + 1, mask=mask, other=0) << 16)
    odd = tl.load(words + 9 + i, mask=mask, other=0)
    zero = tl.zeros_like(even)
    scale_even = (f16(w_ptr, at, valid) * dx_even[None, :])[:, :, None]
    scale_odd = (f16(w_ptr, at + 34, valid) * dx_odd[None, :])[:, :, None]
    return scale_even * dp4a(even, xw_even[None], zero, ASM).to(tl.float32) \
        + scale_odd * dp4a(odd, xw_odd[None], zero, ASM).to(tl.float32)


@triton.jit
def q4_1_int_gemv(w_ptr, x_ptr, n, k0, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, BLOCKS: tl.constexpr,
                  ASM: tl.constexpr):
    """The ``BLOCKS`` ``q4_1`` blocks from input ``k0`` of rows ``n`` times the inputs, ``[BLOCK_N,
    BLOCKS, 4]`` partial sums (added up by the caller after its loop, as :func:`q8_0_int_gemv`'s); 0
    past ``N`` and ``K``. A block's 16 code bytes (after ``d`` and ``m``) are four words whose low
    nibbles are its values 0-15, their high nibbles values 16-31."""
    blk = k0 // 32 + tl.arange(0, BLOCKS)
    inputs = blk[:, None] * 32 + tl.arange(0, 16)[None, :]                           # [BLOCKS, 16]
    x_low = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    x_high = tl.load(x_ptr + inputs + 16, mask=inputs + 16 < K, other=0.0).to(tl.float32)
    xw_low, xw_high, dx, code_sums = quantized_pairs(x_low, x_high)                  # [BLOCKS, 4] x 2, [BLOCKS] x 2
    valid = (n[:, None] < N) & (blk * 32 < K)[None, :]                               # [BLOCK_N, BLOCKS]
    mask = valid[:, :, None]
    j = tl.arange(0, 4)[None, None, :]
    at = n[:, None] * ROW_BYTES + blk[None, :] * 20
    q = tl.load((w_ptr + at + 4).to(tl.pointer_type(tl.int32))[:, :, None] + j, mask=mask, other=0)
    dots = _chained(q & NIBBLES, xw_low[None], (q >> 4) & NIBBLES, xw_high[None], ASM)
    x_sums = tl.sum(x_low, axis=1) + tl.sum(x_high, axis=1)
    return (f16(w_ptr, at, valid) * dx[None, :])[:, :, None] * dots.to(tl.float32) \
        + (f16(w_ptr, at + 2, valid) * x_sums[None, :])[:, :, None] * (j == 0)


@triton.jit
def _straddled(first, second):
    """The words that start 2 bytes into words ``first`` and end 2 bytes into ``second``."""
    return ((first >> 16) & 0xFFFF) | (second << 16)


@triton.jit
def _words4(words):
    """``words`` ``[R, 4]`` (a block's four words) as four ``[R]``, by splits."""
    low, high = tl.split(tl.reshape(words, (words.shape[0], 2, 2)))                  # words 2c + e: e split
    w0, w2 = tl.split(low)
    w1, w3 = tl.split(high)
    return w0, w1, w2, w3


@triton.jit
def _q4_0_dots(q0, q1, q2, q3, x_low, x_high, ASM: tl.constexpr):
    """``dp4a`` of a ``q4_0`` block's four code words ``[BLOCK_N, PAIRS]`` (low nibbles then high) with the
    activations' words ``[PAIRS, 4]``, chained into one integer sum a block."""
    l0, l1, l2, l3 = _words4(x_low)
    h0, h1, h2, h3 = _words4(x_high)
    dots = dp4a(q0 & NIBBLES, l0[None], dp4a((q0 >> 4) & NIBBLES, h0[None], tl.zeros_like(q0), ASM), ASM)
    dots = dp4a(q1 & NIBBLES, l1[None], dp4a((q1 >> 4) & NIBBLES, h1[None], dots, ASM), ASM)
    dots = dp4a(q2 & NIBBLES, l2[None], dp4a((q2 >> 4) & NIBBLES, h2[None], dots, ASM), ASM)
    return dp4a(q3 & NIBBLES, l3[None], dp4a((q3 >> 4) & NIBBLES, h3[None], dots, ASM), ASM)


@triton.jit
def q4_0_int_gemv(w_ptr, x_ptr, n, k0, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, PAIRS: tl.constexpr,
                  ASM: tl.constexpr):
    """The ``2 * PAIRS`` ``q4_0`` blocks from input ``k0`` (a multiple of 64; ``K`` too, so that a row
    and a pair of 18-byte blocks start 4-byte aligned) of rows ``n`` times the inputs, ``[BLOCK_N, PAIRS,
    2]`` partial sums (even block, odd block; added up by the caller after its loop). A pair is 9 words:
    the even block's ``d`` in the low half of word 0, its 16 code bytes from the high half of word 0 to
    the low half of word 4; the odd block's ``d`` in the high half of word 4, its codes words 5-8. A
    block's word ``i`` holds its values ``4i ..`` in the low nibbles and ``16 + 4i ..`` in the high ones;
    a value is its nibble minus 8, summed exactly as ``dp4a(nibbles) - 8 * sum(activation codes)``. Each
    word is a tensor of its own, so that a block's ``dp4a`` chain in one thread."""
    pair = k0 // 64 + tl.arange(0, PAIRS)
    valid = (n[:, None] < N) & (pair * 64 < K)[None, :]                              # [BLOCK_N, PAIRS]
    at = n[:, None] * ROW_BYTES + pair[None, :] * 36
    words = (w_ptr + at).to(tl.pointer_type(tl.int32))
    w0 = tl.load(words, mask=valid, other=0)
    w1 = tl.load(words + 1, mask=valid, other=0)
    w2 = tl.load(words + 2, mask=valid, other=0)
    w3 = tl.load(words + 3, mask=valid, other=0)
    w4 = tl.load(words + 4, mask=valid, other=0)
    o0 = tl.load(words + 5, mask=valid, other=0)
    o1 = tl.load(words + 6, mask=valid, other=0)
    o2 = tl.load(words + 7, mask=valid, other=0)
    o3 = tl.load(words + 8, mask=valid, other=0)
    d_even = _f16_bits(w0)
    d_odd = _f16_bits(w4 >> 16)
    blk = k0 // 32 + tl.arange(0, 2 * PAIRS)                                         # even, odd, even, ...
    inputs = blk[:, None] * 32 + tl.arange(0, 16)[None, :]                           # [2 * PAIRS, 16]
    x_low = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    x_high = tl.load(x_ptr + inputs + 16, mask=inputs + 16 < K, other=0.0).to(tl.float32)
    xw_low, xw_high, dx, code_sums = quantized_pairs(x_low, x_high)                  # [2 * PAIRS, 4], [2 * PAIRS]
    xe_low, xo_low = tl.split(tl.permute(tl.reshape(xw_low, (PAIRS, 2, 4)), (0, 2, 1)))
    xe_high, xo_high = tl.split(tl.permute(tl.reshape(xw_high, (PAIRS, 2, 4)), (0, 2, 1)))
    dx_even, dx_odd = tl.split(tl.reshape(dx, (PAIRS, 2)))
    sums_even, sums_odd = tl.split(tl.reshape(code_sums, (PAIRS, 2)))
    dots_even = _q4_0_dots(_straddled(w0, w1), _straddled(w1, w2), _straddled(w2, w3), _straddled(w3, w4),
                           xe_low, xe_high, ASM) - 8 * sums_even[None, :]
    dots_odd = _q4_0_dots(o0, o1, o2, o3, xo_low, xo_high, ASM) - 8 * sums_odd[None, :]
    return tl.join(d_even * dx_even[None, :] * dots_even.to(tl.float32), d_odd * dx_odd[None, :] * dots_odd.to(tl.float32))


@triton.jit
def _q6_k_words(words, at, mask, ODD: tl.constexpr):
    """Words ``at`` of the even (``ODD`` False) or odd super-block of the pair from int32 ``words``: the
    odd one starts 2 bytes into the pair's word 52."""
    if ODD:
        return _straddled(tl.load(words + 52 + at, mask=mask, other=0), tl.load(words + 53 + at, mask=mask, other=0))
    else:
        return tl.load(words + at, mask=mask, other=0)


@triton.jit
def _q6_k_loads(words, valid, ODD: tl.constexpr):
    """Of the pairs at int32 ``words`` ``[BLOCK_N]``, one super-block's code words and scale words: ``ql0``,
    ``ql1`` and ``qh`` as tuples of four ``[BLOCK_N, 2, 2]`` (word ``i`` of half ``h``, group ``g``; ``j
    = 4g + i``): the ``ql`` words at bytes ``64h + 4j`` and ``64h + 32 + 4j``, the ``qh`` word at ``128 +
    32h + 4j``; the 16 scale bytes' words ``2h`` and ``2h + 1`` (of bytes 192-207) as ``[BLOCK_N, 2,
    1]``. Each word a tensor of its own: a row's words then chain their ``dp4a`` in one thread, where
    a word axis would lie across threads and its sum take shuffles."""
    codes, mask = words[:, None, None], valid[:, None, None]
    j = 16 * tl.arange(0, 2)[None, :, None] + 4 * tl.arange(0, 2)[None, None, :]      # 16h + 4g: [1, 2, 2]
    ql0 = (_q6_k_words(codes, j, mask, ODD), _q6_k_words(codes, j + 1, mask, ODD),
           _q6_k_words(codes, j + 2, mask, ODD), _q6_k_words(codes, j + 3, mask, ODD))
    ql1 = (_q6_k_words(codes, j + 8, mask, ODD), _q6_k_words(codes, j + 9, mask, ODD),
           _q6_k_words(codes, j + 10, mask, ODD), _q6_k_words(codes, j + 11, mask, ODD))
    jh = 32 + 8 * tl.arange(0, 2)[None, :, None] + 4 * tl.arange(0, 2)[None, None, :]  # 32 + 8h + 4g
    qh = (_q6_k_words(codes, jh, mask, ODD), _q6_k_words(codes, jh + 1, mask, ODD),
          _q6_k_words(codes, jh + 2, mask, ODD), _q6_k_words(codes, jh + 3, mask, ODD))
    scale_at = 48 + 2 * tl.arange(0, 2)[None, :, None]
    return ql0, ql1, qh, _q6_k_words(codes, scale_at, mask, ODD), _q6_k_words(codes, scale_at + 1, mask, ODD)


@triton.jit
def _quarters(v):
    """``v`` ``[2, 2, 2, C]`` of rows ``4h + 2a + b`` as its four quarters ``t = 2a + b``, each ``[2, C]``
    (half ``h``), by splits (no reduction)."""
    b0, b1 = tl.split(tl.permute(v, (0, 1, 3, 2)))
    t0, t2 = tl.split(tl.permute(b0, (0, 2, 1)))
    t1, t3 = tl.split(tl.permute(b1, (0, 2, 1)))
    return t0, t1, t2, t3


@triton.jit
def _q6_k_codes(ql0, ql1, qh, t: tl.constexpr):
    """The 6-bit codes of quarter ``t`` in one word of each of ``ql0``, ``ql1``, ``qh``."""
    if t == 0:
        q = (ql0 & NIBBLES) | ((qh << 4) & _HIGH_BITS)
    elif t == 1:
        q = (ql1 & NIBBLES) | ((qh << 2) & _HIGH_BITS)
    elif t == 2:
        q = ((ql0 >> 4) & NIBBLES) | (qh & _HIGH_BITS)
    else:
        q = ((ql1 >> 4) & NIBBLES) | ((qh >> 2) & _HIGH_BITS)
    return q


@triton.jit
def _q6_k_quarter(ql0, ql1, qh, scale_words, x_words, group_sums, dx, t: tl.constexpr, ASM: tl.constexpr):
    """Quarter ``t`` of both halves (:func:`_q6_k_dots`) as ``[BLOCK_N, 2, 2]`` sums, without ``d``: the
    four words' ``dp4a`` chained, word ``i = 2c + e`` of the activations split out of ``x_words``."""
    e0, e1 = tl.split(tl.reshape(x_words, (2, 2, 2, 2)))                             # (h, g, c) each
    x0, x2 = tl.split(e0)
    x1, x3 = tl.split(e1)
    dots = dp4a(_q6_k_codes(ql0[0], ql1[0], qh[0], t), x0[None], tl.zeros_like(qh[0]), ASM)
    dots = dp4a(_q6_k_codes(ql0[1], ql1[1], qh[1], t), x1[None], dots, ASM)
    dots = dp4a(_q6_k_codes(ql0[2], ql1[2], qh[2], t), x2[None], dots, ASM)
    dots = dp4a(_q6_k_codes(ql0[3], ql1[3], qh[3], t), x3[None], dots, ASM)          # [BLOCK_N, 2, 2]
    g = tl.arange(0, 2)[None, None, :]
    scales = ((scale_words << (24 - 8 * (2 * (t % 2) + g))) >> 24).to(tl.float32)     # byte 2 (t % 2) + g, signed
    return scales * tl.reshape(dx, (2,))[None, :, None] * (dots - 32 * group_sums[None, :, :]).to(tl.float32)


@triton.jit
def _q6_k_dots(ql0, ql1, qh, scales_low, scales_high, x_ptr, kb, K, BLOCK_N: tl.constexpr, ASM: tl.constexpr):
    """Super-block ``kb`` of the loaded words (:func:`_q6_k_loads`) times the inputs, without ``d``:
    ``[BLOCK_N, 2, 2]`` sums (half ``h``, group ``g``). Quarter ``t`` of a half (values ``128h + 32t +
    4j ..``, scale byte ``8h + 2t + g``) is ``ql0``'s low nibbles (t 0), ``ql1``'s low (1), ``ql0``'s
    high (2), ``ql1``'s high (3), its two high bits those at ``2t`` in ``qh``; a value is its code minus
    32, summed exactly as ``dp4a(codes) - 32 * sum(activation codes)``. The super-block's inputs are
    rounded to int8 together, rows ``4h + t`` of 32."""
    inputs = kb * 256 + 32 * tl.arange(0, 8)[:, None] + tl.arange(0, 32)[None, :]    # [8, 32]
    x = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    codes, dx = row_codes(x)                                                          # [8, 32], [8]
    w0, w1, w2, w3 = _quarters(tl.reshape(pack4(codes), (2, 2, 2, 8)))                # [2, 8] each
    s0, s1, s2, s3 = _quarters(tl.sum(tl.reshape(codes, (2, 2, 2, 2, 16)), axis=4))  # [2, 2] each
    d0, d1, d2, d3 = _quarters(tl.reshape(dx, (2, 2, 2, 1)))                          # [2, 1] each
    return _q6_k_quarter(ql0, ql1, qh, scales_low, w0, s0, d0, 0, ASM) \
        + _q6_k_quarter(ql0, ql1, qh, scales_low, w1, s1, d1, 1, ASM) \
        + _q6_k_quarter(ql0, ql1, qh, scales_high, w2, s2, d2, 2, ASM) \
        + _q6_k_quarter(ql0, ql1, qh, scales_high, w3, s3, d3, 3, ASM)


@triton.jit
def q6_k_int_pair(w_ptr, x_ptr, n, pair, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, ASM: tl.constexpr):
    """Super-blocks ``2 * pair`` and ``2 * pair + 1`` of ``q6_k`` rows ``n`` (``K`` a multiple of 512, so
    that a row and a pair of 210-byte super-blocks start 4-byte aligned) times the inputs, ``[BLOCK_N,
    2, 2]`` sums (as :func:`_q6_k_dots`, the two super-blocks added)."""
    valid = (n < N) & (pair * 512 + tl.zeros_like(n) < K)
    base = n * ROW_BYTES + pair * 420
    words = (w_ptr + base).to(tl.pointer_type(tl.int32))
    ql0_even, ql1_even, qh_even, low_even, high_even = _q6_k_loads(words, valid, False)
    ql0_odd, ql1_odd, qh_odd, low_odd, high_odd = _q6_k_loads(words, valid, True)
    d_even = f16(w_ptr, base + 208, valid)[:, None, None]
    d_odd = f16(w_ptr, base + 418, valid)[:, None, None]
    return d_even * _q6_k_dots(ql0_even, ql1_even, qh_even, low_even, high_even, x_ptr, 2 * pair, K, BLOCK_N, ASM) \
        + d_odd * _q6_k_dots(ql0_odd, ql1_odd, qh_odd, low_odd, high_odd, x_ptr, 2 * pair + 1, K, BLOCK_N, ASM)


@triton.jit
def _column(words, i: tl.constexpr):
    """Column ``i`` of ``[R, 4]`` int32 ``words`` (the row's 4 words are one thread's: no data moves)."""
    return tl.sum(tl.where(tl.arange(0, 4)[None, :] == i, words, 0), axis=1)


@triton.jit
def _f16_bits(bits):
    """The float16 whose bits are the low 16 of int32 ``bits``, as float32."""
    return (bits & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _q4_k_header_words(w_ptr, base, valid):
    """``q4_k_header`` from the super-blocks' first 16 bytes read as one 4-word load a row (``d`` and
    ``dmin``, then the 12 scale bytes): fewer loads, each converted once to the layout of its use."""
    header = tl.load((w_ptr + base).to(tl.pointer_type(tl.int32))[:, None] + tl.arange(0, 4)[None, :],
                     mask=valid[:, None], other=0)                                    # [BLOCK_N, 4]
    first = _column(header, 0)
    a, b, c = _column(header, 1)[:, None], _column(header, 2)[:, None], _column(header, 3)[:, None]
    pair = tl.arange(0, 4)
    sc_low, m_low = q4_k_scale_min(a, b, c, 2 * pair)
    sc_high, m_high = q4_k_scale_min(a, b, c, 2 * pair + 1)
    return _f16_bits(first)[:, None], _f16_bits(first >> 16)[:, None], sc_low, m_low, sc_high, m_high
