"""Loading a ``[BLOCK_K, BLOCK_N]`` tile of a linear layer's weight as float32, for every weight format
of :mod:`anydev.plugin_api.weight_formats` (whose docstring gives the byte layouts read here). The
per-output-channel scales of ``int8``/``fp8_e4m3`` are not applied here: they factor out of the sum
(the linear kernel multiplies the accumulator once)."""
from __future__ import annotations

from ._common import tl, triton

# Format codes (constexpr): DENSE is a float weight of the activations' dtype.
DENSE, INT8, FP8_E4M3, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K = range(8)
CODES = {"dense": DENSE, "int8": INT8, "fp8_e4m3": FP8_E4M3, "q8_0": Q8_0, "q4_0": Q4_0, "q4_1": Q4_1,
         "q4_k": Q4_K, "q6_k": Q6_K}


@triton.jit
def _byte(ptr, offset, mask):
    return tl.load(ptr + offset, mask=mask, other=0).to(tl.int32)


@triton.jit
def _f16(ptr, offset, mask):
    """The little-endian float16 at byte ``offset``, as float32."""
    bits = (_byte(ptr, offset, mask) | (_byte(ptr, offset + 1, mask) << 8)).to(tl.uint16)
    return bits.to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def weight_tile(w_ptr, n, k, N, K, ROW_BYTES, FORMAT: tl.constexpr):
    """Values ``W[n, k]`` as float32 for ``n`` ``[1, BLOCK_N]`` and ``k`` ``[BLOCK_K, 1]`` (int64);
    0 outside ``n < N``, ``k < K``."""
    mask = (n < N) & (k < K)
    if FORMAT == 0 or FORMAT == 1 or FORMAT == 2:     # dense, int8, fp8_e4m3: one element per value
        w = tl.load(w_ptr + n * K + k, mask=mask, other=0.0).to(tl.float32)
    elif FORMAT == 3:                                 # q8_0: d f16, 32 x int8
        at = n * ROW_BYTES + (k // 32) * 34
        q = tl.load(w_ptr + at + 2 + k % 32, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        w = _f16(w_ptr, at, mask) * q
    elif FORMAT == 4:                                 # q4_0: d f16, 16 bytes of nibbles
        j = k % 32
        at = n * ROW_BYTES + (k // 32) * 18
        q = (_byte(w_ptr, at + 2 + j % 16, mask) >> ((j // 16) * 4)) & 15
        w = _f16(w_ptr, at, mask) * (q - 8).to(tl.float32)
    elif FORMAT == 5:                                 # q4_1: d f16, m f16, 16 bytes of nibbles
        j = k % 32
        at = n * ROW_BYTES + (k // 32) * 20
        q = (_byte(w_ptr, at + 4 + j % 16, mask) >> ((j // 16) * 4)) & 15
        w = _f16(w_ptr, at, mask) * q.to(tl.float32) + _f16(w_ptr, at + 2, mask)
    elif FORMAT == 6:                                 # q4_k: d, dmin, 12 scale bytes, 128 bytes of nibbles
        j = k % 256
        sub = j // 32
        at = n * ROW_BYTES + (k // 256) * 144
        q = (_byte(w_ptr, at + 16 + (j // 64) * 32 + j % 32, mask) >> ((sub % 2) * 4)) & 15
        a = _byte(w_ptr, at + 4 + sub, mask)                          # scales[sub]
        b = _byte(w_ptr, at + 8 + sub, mask)                          # scales[sub + 4]
        c = _byte(w_ptr, at + 4 + tl.maximum(sub - 4, 0), mask)      # scales[sub - 4]
        low = sub < 4
        sc = tl.where(low, a & 63, (b & 15) | ((c >> 6) << 4))
        m = tl.where(low, b & 63, (b >> 4) | ((a >> 6) << 4))
        w = _f16(w_ptr, at, mask) * sc.to(tl.float32) * q.to(tl.float32) - _f16(w_ptr, at + 2, mask) * m.to(tl.float32)
    else:                                             # q6_k: ql 128, qh 64, 16 x int8 scales, d f16
        j = k % 256
        half = j // 128
        quarter = (j % 128) // 32
        lane = j % 32
        at = n * ROW_BYTES + (k // 256) * 210
        low = (_byte(w_ptr, at + half * 64 + (quarter % 2) * 32 + lane, mask) >> ((quarter // 2) * 4)) & 15
        high = (_byte(w_ptr, at + 128 + half * 32 + lane, mask) >> (quarter * 2)) & 3
        scale = tl.load(w_ptr + at + 192 + j // 16, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        w = _f16(w_ptr, at + 208, mask) * scale * ((low | (high << 4)) - 32).to(tl.float32)
    return w


@triton.jit
def q4_k_gemv_block(w_ptr, x_ptr, n, kb, N, K, ROW_BYTES, BLOCK_N: tl.constexpr):
    """``sum_k W[n, k] * x[k]`` over super-block ``kb`` (256 inputs) of ``q4_k`` rows ``n``
    ``[BLOCK_N]``, as float32 ``[BLOCK_N]``; 0 outside ``n < N`` and ``kb < K / 256``. Each row's 128
    bytes of nibbles are one contiguous load; a sub-block's scale and min multiply its sum once
    (``d * sc * sum(q x) - dmin * m * sum(x)``), as llama.cpp's dot products do."""
    valid = (n < N) & (kb * 256 + tl.zeros_like(n) < K)
    base = n * ROW_BYTES + kb * 144                                              # [BLOCK_N]
    j = tl.arange(0, 128)
    q = tl.load(w_ptr + base[:, None] + 16 + j[None, :], mask=valid[:, None] & (j < 128)[None, :], other=0).to(tl.int32)
    lanes = kb * 256 + (j // 32) * 64 + j % 32           # the inputs of the low nibbles; the high: + 32
    x_low = tl.load(x_ptr + lanes, mask=lanes < K, other=0.0).to(tl.float32)
    x_high = tl.load(x_ptr + lanes + 32, mask=lanes + 32 < K, other=0.0).to(tl.float32)
    low = tl.sum(tl.reshape((q & 15).to(tl.float32) * x_low[None, :], (BLOCK_N, 4, 32)), axis=2)   # sub-blocks 0, 2, 4, 6
    high = tl.sum(tl.reshape((q >> 4).to(tl.float32) * x_high[None, :], (BLOCK_N, 4, 32)), axis=2)  # 1, 3, 5, 7
    s = tl.arange(0, 8)
    rows = valid[:, None] & (s < 8)[None, :]                                         # [BLOCK_N, 8]
    a = _byte(w_ptr, base[:, None] + 4 + s[None, :], rows)                          # scales[s]
    b = _byte(w_ptr, base[:, None] + 8 + s[None, :], rows)                          # scales[s + 4]
    c = _byte(w_ptr, base[:, None] + 4 + tl.maximum(s - 4, 0)[None, :], rows)
    first = (s < 4)[None, :]
    sc = tl.where(first, a & 63, (b & 15) | ((c >> 6) << 4)).to(tl.float32)        # [BLOCK_N, 8]
    m = tl.where(first, b & 63, (b >> 4) | ((a >> 6) << 4)).to(tl.float32)
    sc_even, sc_odd = tl.split(tl.reshape(sc, (BLOCK_N, 4, 2)))
    inputs = kb * 256 + tl.arange(0, 256)
    x_sums = tl.sum(tl.reshape(tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32), (8, 32)), axis=1)
    scaled = tl.sum(sc_even * low + sc_odd * high, axis=1)
    mins = tl.sum(m * x_sums[None, :], axis=1)
    return _f16(w_ptr, base, valid) * scaled - _f16(w_ptr, base + 2, valid) * mins


@triton.jit
def q6_k_gemv_block(w_ptr, x_ptr, n, kb, N, K, ROW_BYTES, BLOCK_N: tl.constexpr):
    """:func:`q4_k_gemv_block` for ``q6_k``: each row's 128 bytes of low nibbles in one contiguous load
    (byte ``j``: half ``h = j // 64``, quarter ``r = j % 64 // 32``, lane ``l = j % 32``; its low nibble
    is value ``128h + 32r + l``, its high nibble value ``128h + 64 + 32r + l``), the high bits from
    ``qh[32h + l]``, and each 16-value group's sum multiplied by its scale once."""
    valid = (n < N) & (kb * 256 + tl.zeros_like(n) < K)
    base = n * ROW_BYTES + kb * 210                                              # [BLOCK_N]
    j = tl.arange(0, 128)
    half, quarter, lane = j // 64, (j % 64) // 32, j % 32
    both = valid[:, None] & (j < 128)[None, :]
    ql = tl.load(w_ptr + base[:, None] + j[None, :], mask=both, other=0).to(tl.int32)
    qh = tl.load(w_ptr + base[:, None] + 128 + (32 * half + lane)[None, :], mask=both, other=0).to(tl.int32)
    low = ((ql & 15) | (((qh >> (2 * quarter)[None, :]) & 3) << 4)) - 32
    high = ((ql >> 4) | (((qh >> (4 + 2 * quarter)[None, :]) & 3) << 4)) - 32
    inputs = kb * 256 + 128 * half + 32 * quarter + lane                           # of the low nibbles; high: + 64
    x_low = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    x_high = tl.load(x_ptr + inputs + 64, mask=inputs + 64 < K, other=0.0).to(tl.float32)
    # 16-lane groups g = j // 16 = 4h + 2r + l // 16: the low values' scale is 8h + (g % 4), the high's + 4
    low_sums = tl.sum(tl.reshape(low.to(tl.float32) * x_low[None, :], (BLOCK_N, 8, 16)), axis=2)
    high_sums = tl.sum(tl.reshape(high.to(tl.float32) * x_high[None, :], (BLOCK_N, 8, 16)), axis=2)
    g = tl.arange(0, 8)
    groups = valid[:, None] & (g < 8)[None, :]
    scale_at = base[:, None] + 192 + (8 * (g // 4) + g % 4)[None, :]
    sc_low = tl.load(w_ptr + scale_at, mask=groups, other=0).to(tl.int8, bitcast=True).to(tl.float32)
    sc_high = tl.load(w_ptr + scale_at + 4, mask=groups, other=0).to(tl.int8, bitcast=True).to(tl.float32)
    return _f16(w_ptr, base + 208, valid) * tl.sum(sc_low * low_sums + sc_high * high_sums, axis=1)


@triton.jit
def block32_gemv(w_ptr, x_ptr, n, k0, N, K, ROW_BYTES, FORMAT: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCKS: tl.constexpr):
    """``sum_k W[n, k] * x[k]`` over the ``BLOCKS`` 32-value blocks from input ``k0`` of ``q8_0``,
    ``q4_0`` or ``q4_1`` rows ``n`` ``[BLOCK_N]``, as float32 ``[BLOCK_N]``: each block's quants
    times the inputs summed, then multiplied by its ``d`` once (plus ``m * sum(x)`` for q4_1)."""
    blk = k0 // 32 + tl.arange(0, BLOCKS)
    j = tl.arange(0, 32)
    valid = (n[:, None] < N) & (blk * 32 < K)[None, :]                               # [BLOCK_N, BLOCKS]
    every = valid[:, :, None] & (j < 32)[None, None, :]
    if FORMAT == 3:                                                                  # q8_0
        at = n[:, None] * ROW_BYTES + blk[None, :] * 34
        q = tl.load(w_ptr + at[:, :, None] + 2 + j[None, None, :], mask=every, other=0)
        q = q.to(tl.int8, bitcast=True).to(tl.float32)
    else:                                                                            # q4_0, q4_1: nibbles
        if FORMAT == 4:
            at = n[:, None] * ROW_BYTES + blk[None, :] * 18
            first = 2
        else:
            at = n[:, None] * ROW_BYTES + blk[None, :] * 20
            first = 4
        byte = tl.load(w_ptr + at[:, :, None] + first + (j % 16)[None, None, :], mask=every, other=0).to(tl.int32)
        q = ((byte >> ((j // 16) * 4)[None, None, :]) & 15).to(tl.float32)
        if FORMAT == 4:
            q = q - 8.0
    inputs = blk[:, None] * 32 + j[None, :]                                          # [BLOCKS, 32]
    x = tl.load(x_ptr + inputs, mask=inputs < K, other=0.0).to(tl.float32)
    total = _f16(w_ptr, at, valid) * tl.sum(q * x[None, :, :], axis=2)               # [BLOCK_N, BLOCKS]
    if FORMAT == 5:
        total += _f16(w_ptr, at + 2, valid) * tl.sum(x, axis=1)[None, :]
    return tl.sum(total, axis=1)
