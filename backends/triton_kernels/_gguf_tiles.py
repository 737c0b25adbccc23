"""The GGUF block formats' tiles for the linear kernel family, read from the blocks as stored.

Batch 1 (one step of the GEMV, ``BLOCK_N`` rows over one stretch of ``K``): ``q4_k`` as the sums of its
sub-blocks ``[BLOCK_N, 4]`` (each thread sums the values it holds); ``q6_k`` and the 32-value blocks as
the products ``W[n, k] * x[k]`` in a tile ``[BLOCK_N, groups, values a group]`` (a group: the values
that share a scale) that the caller adds up elementwise and sums after its loop. Each form is the
faster of the two for its formats.

More rows (``tl.dot``): the same dequantization, a block's scales applied to its values at once, then
the values laid out in input order (:func:`k_quant_tile`, :func:`block32_values`).

The quants are read as whole rows of a block (contiguous loads), in the tile's shape."""
from __future__ import annotations

from ._common import tl, triton
from ._weight_tiles import byte, exact_float, f16, int8_float


@triton.jit
def q4_k_scale_min(a, b, c, sub):
    """Sub-block ``sub``'s 6-bit scale and min (llama.cpp's ``get_scale_min_k4``) from the 12 scale
    bytes read as three little-endian words ``a``, ``b``, ``c`` ``[BLOCK_N, 1]``; ``sub`` ``[S]``."""
    shift = (8 * (sub % 4))[None, :]
    first = (sub < 4)[None, :]
    A, B, C = (a >> shift) & 255, (b >> shift) & 255, (c >> shift) & 255      # scales[s % 4], [4 + s % 4], [8 + s % 4]
    sc = tl.where(first, A & 63, (C & 15) | ((A >> 6) << 4))
    m = tl.where(first, B & 63, (C >> 4) | ((B >> 6) << 4))
    return exact_float(sc, 0), exact_float(m, 0)


@triton.jit
def _q4_k_super_block(w_ptr, n, kb, valid, ROW_BYTES):
    """Super-block ``kb`` of ``q4_k`` rows ``n``: its nibble bytes ``q`` ``[BLOCK_N, 4, 32]`` (bytes
    ``32p .. 32p + 31`` hold sub-block ``2p`` in their low nibbles, ``2p + 1`` in their high ones),
    ``d`` and ``dmin`` ``[BLOCK_N, 1]``, and the sub-blocks' scales and mins ``[BLOCK_N, 4]`` (low,
    then high); the 12 scale bytes are read as three words."""
    base = n * ROW_BYTES + kb * 144
    pair = tl.arange(0, 4)
    lane = tl.arange(0, 32)
    q = byte(w_ptr, base[:, None, None] + 16 + (32 * pair)[None, :, None] + lane[None, None, :], valid[:, None, None])
    d, dmin, sc_low, m_low, sc_high, m_high = q4_k_header(w_ptr, base, valid)
    return q, d, dmin, sc_low, m_low, sc_high, m_high


@triton.jit
def q4_k_header(w_ptr, base, valid):
    """The ``q4_k`` super-blocks at bytes ``base`` ``[BLOCK_N]``: ``d`` and ``dmin`` ``[BLOCK_N, 1]``
    and the sub-blocks' scales and mins ``[BLOCK_N, 4]`` (low, then high, of each pair); the 12
    scale bytes are read as three words."""
    pair = tl.arange(0, 4)
    words = (w_ptr + base + 4).to(tl.pointer_type(tl.int32))
    a = tl.load(words, mask=valid, other=0)[:, None]
    b = tl.load(words + 1, mask=valid, other=0)[:, None]
    c = tl.load(words + 2, mask=valid, other=0)[:, None]
    d = f16(w_ptr, base, valid)[:, None]
    dmin = f16(w_ptr, base + 2, valid)[:, None]
    sc_low, m_low = q4_k_scale_min(a, b, c, 2 * pair)
    sc_high, m_high = q4_k_scale_min(a, b, c, 2 * pair + 1)
    return d, dmin, sc_low, m_low, sc_high, m_high


@triton.jit
def q4_k_gemv_block(w_ptr, x_ptr, n, kb, N, K, ROW_BYTES, BLOCK_N: tl.constexpr):
    """Super-block ``kb < K / 256`` of ``q4_k`` rows as ``[BLOCK_N, 4]`` sums: a pair of sub-blocks
    adds ``d * (sc * sum(q x)) - dmin * m * sum(x)`` of both."""
    inputs = kb * 256 + (64 * tl.arange(0, 4))[:, None] + tl.arange(0, 32)[None, :]   # [4, 32]: the low nibbles'
    x_low = tl.load(x_ptr + inputs).to(tl.float32)[None, :, :]
    x_high = tl.load(x_ptr + inputs + 32).to(tl.float32)[None, :, :]
    q, d, dmin, sc_low, m_low, sc_high, m_high = _q4_k_super_block(w_ptr, n, kb, n < N, ROW_BYTES)
    low = tl.sum(exact_float(q & 15, 0) * x_low, axis=2)                          # [BLOCK_N, 4]
    high = tl.sum(exact_float(q >> 4, 0) * x_high, axis=2)
    mins = m_low * tl.sum(x_low, axis=2) + m_high * tl.sum(x_high, axis=2)
    return d * (sc_low * low + sc_high * high) - dmin * mins


@triton.jit
def _q6_k_super_block(w_ptr, n, kb, valid, ROW_BYTES):
    """Super-block ``kb`` of ``q6_k`` rows ``n`` in 8 groups ``g`` of 16 bytes of ``ql`` (byte ``16g + i``:
    half ``h = g // 4``, quarter ``r = g // 2 % 2``, lane ``16 (g % 2) + i``): a byte's low nibble is
    value ``128h + 16 (g % 4) + i`` (scale ``8h + g % 4``), its high nibble that value + 64 (scale + 4);
    their two high bits are in ``qh[32h + 16 (g % 2) + i]`` at bits ``2r`` and ``2r + 4``. Returns the
    low and high values ``q - 32`` ``[BLOCK_N, 8, 16]`` and their scales times ``d`` ``[BLOCK_N, 8]``."""
    base = n * ROW_BYTES + kb * 210                                              # [BLOCK_N]
    g = tl.arange(0, 8)
    i = tl.arange(0, 16)
    rows = base[:, None, None]
    ql = byte(w_ptr, rows + (16 * g)[None, :, None] + i[None, None, :], valid[:, None, None])
    qh = byte(w_ptr, rows + 128 + (32 * (g // 4) + 16 * (g % 2))[None, :, None] + i[None, None, :], valid[:, None, None])
    shift = (2 * (g // 2 % 2))[None, :, None]
    low = exact_float((ql & 15) | (((qh >> shift) & 3) << 4), 32)
    high = exact_float((ql >> 4) | (((qh >> (shift + 4)) & 3) << 4), 32)
    scale_at = base[:, None] + 192 + (8 * (g // 4) + g % 4)[None, :]
    groups = valid[:, None] & (g < 8)[None, :]
    d = f16(w_ptr, base + 208, valid)[:, None]
    sc_low = d * tl.load(w_ptr + scale_at, mask=groups, other=0).to(tl.int8, bitcast=True).to(tl.float32)
    sc_high = d * tl.load(w_ptr + scale_at + 4, mask=groups, other=0).to(tl.int8, bitcast=True).to(tl.float32)
    return low, high, sc_low, sc_high


@triton.jit
def q6_k_gemv_block(w_ptr, x_ptr, n, kb, N, K, ROW_BYTES, BLOCK_N: tl.constexpr):
    """Super-block ``kb`` of ``q6_k`` rows as ``[BLOCK_N, 8, 16]`` products (groups as
    :func:`_q6_k_super_block`)."""
    valid = (n < N) & (kb * 256 + tl.zeros_like(n) < K)
    low, high, sc_low, sc_high = _q6_k_super_block(w_ptr, n, kb, valid, ROW_BYTES)
    g = tl.arange(0, 8)
    inputs = kb * 256 + (128 * (g // 4) + 16 * (g % 4))[:, None] + tl.arange(0, 16)[None, :]   # [8, 16]: the low values'
    x_low = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    x_high = tl.load(x_ptr + inputs + 64, mask=inputs + 64 < K, other=0.0).to(tl.float32)
    return sc_low[:, :, None] * low * x_low[None, :, :] + sc_high[:, :, None] * high * x_high[None, :, :]


@triton.jit
def block32_values(w_ptr, n, k0, N, K, ROW_BYTES, FORMAT: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCKS: tl.constexpr):
    """The ``BLOCKS`` 32-value blocks from input ``k0`` of ``q8_0`` (3), ``q4_0`` (4) or ``q4_1`` (5)
    rows ``n`` dequantized, float32 ``[BLOCK_N, BLOCKS, 32]`` (in input order); 0 past ``N`` and ``K``."""
    blk = k0 // 32 + tl.arange(0, BLOCKS)
    j = tl.arange(0, 32)
    valid = (n[:, None] < N) & (blk * 32 < K)[None, :]                               # [BLOCK_N, BLOCKS]
    if FORMAT == 3:                                                                  # q8_0
        at = n[:, None] * ROW_BYTES + blk[None, :] * 34
        q = int8_float(tl.load(w_ptr + at[:, :, None] + 2 + j[None, None, :], mask=valid[:, :, None], other=0))
    else:                                                                            # q4_0, q4_1: nibbles
        if FORMAT == 4:
            at = n[:, None] * ROW_BYTES + blk[None, :] * 18
            first = 2
        else:
            at = n[:, None] * ROW_BYTES + blk[None, :] * 20
            first = 4
        nibbles = byte(w_ptr, at[:, :, None] + first + (j % 16)[None, None, :], valid[:, :, None])
        q = exact_float((nibbles >> ((j // 16) * 4)[None, None, :]) & 15, 8 if FORMAT == 4 else 0)
    w = f16(w_ptr, at, valid)[:, :, None] * q
    if FORMAT == 5:
        w += f16(w_ptr, at + 2, valid)[:, :, None]
    return w


@triton.jit
def block32_gemv(w_ptr, x_ptr, n, k0, N, K, ROW_BYTES, FORMAT: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCKS: tl.constexpr):
    """:func:`block32_values` times the inputs, ``[BLOCK_N, BLOCKS, 32]`` products."""
    inputs = (k0 // 32 + tl.arange(0, BLOCKS))[:, None] * 32 + tl.arange(0, 32)[None, :]     # [BLOCKS, 32]
    x = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)[None, :, :]
    return block32_values(w_ptr, n, k0, N, K, ROW_BYTES, FORMAT, BLOCK_N, BLOCKS) * x


@triton.jit
def k_quant_tile(w_ptr, n, kb, N, ROW_BYTES, FORMAT: tl.constexpr, BLOCK_N: tl.constexpr):
    """Super-block ``kb`` of ``q4_k`` (6) or ``q6_k`` (7) rows ``n`` dequantized as float32 ``[256,
    BLOCK_N]`` in input order, for ``tl.dot``: each sub-block's scale (and min) applied to its values
    at once, the values built in the GEMVs' tile shapes, then interleaved into input order."""
    valid = n < N
    if FORMAT == 6:
        q, d, dmin, sc_low, m_low, sc_high, m_high = _q4_k_super_block(w_ptr, n, kb, valid, ROW_BYTES)
        low = (d * sc_low)[:, :, None] * exact_float(q & 15, 0) - (dmin * m_low)[:, :, None]     # values 64p + l
        high = (d * sc_high)[:, :, None] * exact_float(q >> 4, 0) - (dmin * m_high)[:, :, None]  # 64p + 32 + l
    else:
        low, high, sc_low, sc_high = _q6_k_super_block(w_ptr, n, kb, valid, ROW_BYTES)
        # group g = 4h + j: its low values are 128h + 16j + i, its high values those + 64
        low = tl.reshape(sc_low[:, :, None] * low, (BLOCK_N, 2, 64))       # per half h: values 128h + [0, 64)
        high = tl.reshape(sc_high[:, :, None] * high, (BLOCK_N, 2, 64))    # 128h + 64 + [0, 64)
    # a group's low values, then its high values, are consecutive inputs
    w = tl.reshape(tl.permute(tl.join(low, high), (0, 1, 3, 2)), (BLOCK_N, 256))
    return tl.trans(w)
