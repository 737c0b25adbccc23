"""The GGUF GEMV steps at batch 1 on int8 activations (:mod:`._int_dot`): the weights' codes read as
words of four bytes, multiplied by the activations' codes with ``dp4a``, each block's integer sum
scaled once. Same steps and partial sums as the float GEMVs of :mod:`._gguf_tiles` (layouts:
:mod:`anydev.plugin_api.weight_formats`).

Word loads: ``q4_k``'s nibbles (at byte 16 of a 144-byte super-block) and ``q4_1``'s (byte 4 of a
20-byte block) are 4-byte aligned, and so is a pair of ``q8_0``'s 34-byte blocks (read as 17 words);
``q4_0``'s 18-byte and ``q6_k``'s 210-byte blocks only 2-byte aligned, so their words are read as two
halves."""
from __future__ import annotations

from ._common import tl, triton
from ._gguf_tiles import q4_k_scale_min
from ._int_dot import NIBBLES, dp4a, pack4, quantized_pairs, quantized_rows, row_codes
from ._weight_tiles import f16

#: The two high bits of each byte's 6-bit ``q6_k`` code, in place (bits 4-5 of every byte).
_HIGH_BITS = tl.constexpr(0x30303030)


@triton.jit
def _halves(halves_ptr, at, mask):
    """The words whose low halves are int16 ``at`` of ``halves_ptr`` (2-byte aligned), as int32."""
    low = tl.load(halves_ptr + at, mask=mask, other=0).to(tl.int32) & 0xFFFF
    high = tl.load(halves_ptr + at + 1, mask=mask, other=0).to(tl.int32)
    return low | (high << 16)


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
def block32_int_gemv(w_ptr, x_ptr, n, k0, N, K, ROW_BYTES, FORMAT: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCKS: tl.constexpr, ASM: tl.constexpr):
    """The ``BLOCKS`` 32-value blocks from input ``k0`` of ``q4_0`` (4) or ``q4_1`` (5) rows ``n`` times
    the inputs, ``[BLOCK_N, BLOCKS, 4]`` partial sums (added up by the caller after its loop, as
    :func:`q8_0_int_gemv`'s); 0 past ``N`` and ``K``. A block's 16 bytes are four words whose low
    nibbles are its values 0-15, their high nibbles values 16-31."""
    blk = k0 // 32 + tl.arange(0, BLOCKS)
    inputs = blk[:, None] * 32 + tl.arange(0, 16)[None, :]                           # [BLOCKS, 16]
    x_low = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    x_high = tl.load(x_ptr + inputs + 16, mask=inputs + 16 < K, other=0.0).to(tl.float32)
    xw_low, xw_high, dx, code_sums = quantized_pairs(x_low, x_high)                  # [BLOCKS, 4] x 2, [BLOCKS] x 2
    valid = (n[:, None] < N) & (blk * 32 < K)[None, :]                               # [BLOCK_N, BLOCKS]
    mask = valid[:, :, None]
    j = tl.arange(0, 4)[None, None, :]
    if FORMAT == 4:                                                                  # q4_0: d, then 16 bytes
        at = n[:, None] * ROW_BYTES + blk[None, :] * 18
        q = _halves((w_ptr + at + 2).to(tl.pointer_type(tl.int16))[:, :, None], 2 * j, mask)
        dots = _chained(q & NIBBLES, xw_low[None], (q >> 4) & NIBBLES, xw_high[None], ASM) \
            - (8 * code_sums)[None, :, None] * (j == 0)                              # q - 8, summed exactly
        return (f16(w_ptr, at, valid) * dx[None, :])[:, :, None] * dots.to(tl.float32)
    else:                                                                            # q4_1: d, m, then 16 bytes
        at = n[:, None] * ROW_BYTES + blk[None, :] * 20
        q = tl.load((w_ptr + at + 4).to(tl.pointer_type(tl.int32))[:, :, None] + j, mask=mask, other=0)
        dots = _chained(q & NIBBLES, xw_low[None], (q >> 4) & NIBBLES, xw_high[None], ASM)
        x_sums = tl.sum(x_low, axis=1) + tl.sum(x_high, axis=1)
        return (f16(w_ptr, at, valid) * dx[None, :])[:, :, None] * dots.to(tl.float32) \
            + (f16(w_ptr, at + 2, valid) * x_sums[None, :])[:, :, None] * (j == 0)


@triton.jit
def q6_k_int_block(w_ptr, x_ptr, n, kb, N, K, ROW_BYTES, BLOCK_N: tl.constexpr, ASM: tl.constexpr):
    """Super-block ``kb`` of ``q6_k`` rows times the inputs, ``[BLOCK_N, 2, 2]`` sums (half ``h``, group
    ``g``). For word ``j = 4g + i`` of a half, ``QL0``/``QL1`` the ``ql`` words at bytes ``64h + 4j`` and
    ``64h + 32 + 4j`` and ``QH`` the ``qh`` word at ``32h + 4j``: quarter ``t`` of the half (values
    ``128h + 32t + 4j ..``, scale ``8h + 2t + g``) is ``QL0``'s low nibbles (t 0), ``QL1``'s low (1),
    ``QL0``'s high (2), ``QL1``'s high (3), its two high bits those at ``2t`` in ``QH``."""
    valid = (n < N) & (kb * 256 + tl.zeros_like(n) < K)
    base = n * ROW_BYTES + kb * 210
    halves = (w_ptr + base).to(tl.pointer_type(tl.int16))[:, None, None, None]
    h = tl.arange(0, 2)[None, :, None, None]
    g = tl.arange(0, 2)[None, None, :, None]
    j = 4 * g + tl.arange(0, 4)[None, None, None, :]                                  # [1, 2, 2, 4]
    mask = valid[:, None, None, None]
    ql0 = _halves(halves, 32 * h + 2 * j, mask)                                      # [BLOCK_N, 2, 2, 4]
    ql1 = _halves(halves, 32 * h + 16 + 2 * j, mask)
    qh = _halves(halves, 64 + 16 * h + 2 * j, mask)
    d = f16(w_ptr, base + 208, valid)[:, None, None]
    scale_at = (base + 192)[:, None, None] + (8 * tl.arange(0, 2))[None, :, None] + tl.arange(0, 2)[None, None, :]
    scale_mask = valid[:, None, None]
    acc = tl.zeros((BLOCK_N, 2, 2), dtype=tl.float32)
    for t in tl.static_range(4):
        inputs = kb * 256 + (128 * tl.arange(0, 2))[:, None] + 32 * t + tl.arange(0, 32)[None, :]   # [2, 32]
        x = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
        codes, dx = row_codes(x)                                                      # [2, 32], [2]
        x_words = tl.reshape(pack4(codes), (2, 2, 4))
        group_sums = tl.sum(tl.reshape(codes, (2, 2, 16)), axis=2)                    # [2, 2]
        if t == 0:
            q = (ql0 & NIBBLES) | ((qh << 4) & _HIGH_BITS)
        elif t == 1:
            q = (ql1 & NIBBLES) | ((qh << 2) & _HIGH_BITS)
        elif t == 2:
            q = ((ql0 >> 4) & NIBBLES) | (qh & _HIGH_BITS)
        else:
            q = ((ql1 >> 4) & NIBBLES) | ((qh >> 2) & _HIGH_BITS)
        dots = _dots(q, x_words[None, :, :, :], 3, ASM)                                    # [BLOCK_N, 2, 2]
        scales = tl.load(w_ptr + scale_at + 2 * t, mask=scale_mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        acc += scales * dx[None, :, None] * (dots - 32 * group_sums[None, :, :]).to(tl.float32)
    return d * acc



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
