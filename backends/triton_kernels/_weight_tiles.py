"""Reading a linear layer's weight for the linear kernel family: a ``[BLOCK_K, BLOCK_N]`` float32 tile of
the one-element-a-value formats (:func:`weight_tile`), and the helpers the GGUF block tiles of
:mod:`._gguf_tiles` read their bytes with (layouts: :mod:`anydev.plugin_api.weight_formats`). The
per-output-channel scales of ``int8``/``fp8_e4m3`` are not applied here: they factor out of the sum
(the linear kernel multiplies the accumulator once).

The GGUF quants become floats by the exponent trick (``(u | 0x4B000000)`` read as float32 is ``2**23
+ u``): an integer and a float operation instead of a conversion instruction, which the GPUs run at a
fraction of their float rate."""
from __future__ import annotations

from ._common import tl, triton

# Format codes (constexpr): DENSE is a float weight of the activations' dtype.
DENSE, INT8, FP8_E4M3, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, Q8_0_SPLIT, Q6_K_SPLIT = range(10)
CODES = {"dense": DENSE, "int8": INT8, "fp8_e4m3": FP8_E4M3, "q8_0": Q8_0, "q4_0": Q4_0, "q4_1": Q4_1,
         "q4_k": Q4_K, "q6_k": Q6_K, "q8_0_split": Q8_0_SPLIT, "q6_k_split": Q6_K_SPLIT}


@triton.jit
def exact_float(u, BIAS: tl.constexpr):
    """``u - BIAS`` as float32, exactly, for int32 ``u`` in [0, 2**23)."""
    return (u.to(tl.int32) | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + BIAS)


@triton.jit
def int8_float(q):
    """int8 ``q`` as float32, exactly: ``q + 128`` is the low byte of ``q``'s bits with bit 7 flipped."""
    u = q.to(tl.uint8, bitcast=True).to(tl.int32)
    return (u ^ 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0


@triton.jit
def codes_float(q, ASM: tl.constexpr):
    """int8 ``q`` as float32, exactly, as :func:`int8_float`; with ``ASM`` (PTX) four codes a word: one
    ``xor`` flips their sign bits, two ``prmt`` put each byte under the float16 bits ``0x64`` (``1024 +
    byte``), a float16 pair subtraction a pair leaves the codes, and a conversion a value makes them
    float32: 2.25 instructions a value where :func:`int8_float` takes nearly 3."""
    if ASM:
        return tl.inline_asm_elementwise(
            """{
            .reg .b32 flipped, low, high, magic, offset, sel_low, sel_high;
            .reg .b16 h0, h1, h2, h3;
            mov.b32 magic, 0x64646464;
            mov.b32 offset, 0x64806480;
            mov.b32 sel_low, 0x4140;
            mov.b32 sel_high, 0x4342;
            xor.b32 flipped, $4, 0x80808080;
            prmt.b32 low, flipped, magic, sel_low;
            prmt.b32 high, flipped, magic, sel_high;
            sub.f16x2 low, low, offset;
            sub.f16x2 high, high, offset;
            mov.b32 {h0, h1}, low;
            mov.b32 {h2, h3}, high;
            cvt.f32.f16 $0, h0;
            cvt.f32.f16 $1, h1;
            cvt.f32.f16 $2, h2;
            cvt.f32.f16 $3, h3;
            }""", "=f,=f,=f,=f,r", [q], dtype=tl.float32, is_pure=True, pack=4)
    else:
        return int8_float(q)


@triton.jit
def byte(ptr, offset, mask):
    return tl.load(ptr + offset, mask=mask, other=0).to(tl.int32)


@triton.jit
def f16(ptr, offset, mask):
    """The little-endian float16 at (even) byte ``offset``, as float32."""
    return tl.load((ptr + offset).to(tl.pointer_type(tl.float16)), mask=mask, other=0.0).to(tl.float32)


@triton.jit
def stored_values(w_ptr, n, k, N, K):
    """Values ``W[n, k]`` of a one-element-a-value format (dense, int8, fp8_e4m3) as stored, for ``n``
    ``[1, BLOCK_N]`` and ``k`` ``[BLOCK_K, 1]`` (int64); 0 outside ``n < N``, ``k < K``."""
    return tl.load(w_ptr + n * K + k, mask=(n < N) & (k < K), other=0.0)


@triton.jit
def weight_tile(w_ptr, n, k, N, K, FORMAT: tl.constexpr):
    """:func:`stored_values` as float32. The GGUF blocks have their own tiles (:mod:`._gguf_tiles`)."""
    tl.static_assert(FORMAT == 0 or FORMAT == 1 or FORMAT == 2, "weight_tile: one element a value only")
    return stored_values(w_ptr, n, k, N, K).to(tl.float32)


@triton.jit
def split_group_sums(w_ptr, x, n, k0, N, K, ROW_BYTES, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
                     ASM: tl.constexpr):
    """A ``q8_0_split`` step at batch 1: the ``BLOCK_K // 32`` groups from input ``k0`` (a multiple of
    32) of rows ``n`` ``[BLOCK_N]``, each group's codes times ``x`` ``[BLOCK_K]`` (float32) summed and
    scaled by its ``d``: ``[BLOCK_K // 32, BLOCK_N]`` (a group's sum needs no more than its neighbouring
    thread)."""
    codes = split_codes(w_ptr, n, k0, N, K, ROW_BYTES, BLOCK_K)
    products = tl.reshape(codes_float(codes, ASM) * x[:, None], (BLOCK_K // 32, 32, BLOCK_N))
    return tl.sum(products, axis=1) * split_scales(w_ptr, n, k0 // 32, N, K, ROW_BYTES, BLOCK_K // 32)


@triton.jit
def split_tile(w_ptr, n, k0, N, K, ROW_BYTES, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """``W`` ``[BLOCK_K, BLOCK_N]`` float32 of a ``q8_0_split`` weight from input ``k0`` (a multiple of 32)."""
    codes = split_codes(w_ptr, n, k0, N, K, ROW_BYTES, BLOCK_K)
    groups = tl.reshape(int8_float(codes), (BLOCK_K // 32, 32, BLOCK_N))
    d = split_scales(w_ptr, n, k0 // 32, N, K, ROW_BYTES, BLOCK_K // 32)
    return tl.reshape(groups * d[:, None, :], (BLOCK_K, BLOCK_N))


@triton.jit
def split_codes(w_ptr, n, k0, N, K, ROW_BYTES, BLOCK_K: tl.constexpr):
    """The int8 codes ``[BLOCK_K, BLOCK_N]`` of inputs ``k0 ..`` of rows ``n`` of a ``q8_0_split``
    weight (0 past ``N`` and ``K``): a row's run loads whole, as int8's tile."""
    k = k0 + tl.arange(0, BLOCK_K)
    return tl.load(w_ptr.to(tl.pointer_type(tl.int8)) + n[None, :] * ROW_BYTES + k[:, None],
                   mask=(n[None, :] < N) & (k[:, None] < K), other=0)


@triton.jit
def split_scales(w_ptr, n, g0, N, K, ROW_BYTES, GROUPS: tl.constexpr):
    """The ``d`` of groups ``g0 ..`` of rows ``n`` of a ``q8_0_split`` weight, ``[GROUPS, BLOCK_N]``
    float32 (0 past ``N`` and ``K``)."""
    g = g0 + tl.arange(0, GROUPS)
    return f16(w_ptr, n[None, :] * ROW_BYTES + K + 2 * g[:, None], (n[None, :] < N) & (g[:, None] * 32 < K))


@triton.jit
def q6_split_halves(w_ptr, n, k0, N, K, ROW_BYTES, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """A ``q6_k_split`` step from input ``k0`` (``BLOCK_K`` and ``k0`` multiples of 256) of rows ``n``:
    the values ``16g + j`` (first half) and ``16g + 8 + j`` (second half), ``j < 8``, of each of its
    ``G = BLOCK_K // 16`` groups as float32 ``[G, 8, BLOCK_N]`` codes minus 32, and each group's scale
    times its ``d``, ``[G, BLOCK_N]``. Each plane's run of a row loads whole (coalesced, as int8's)."""
    G: tl.constexpr = BLOCK_K // 16
    row = n[None, :] * ROW_BYTES
    rows_in = n[None, :] < N
    low_at = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    lows = tl.load(w_ptr + row + low_at[:, None], mask=rows_in & (low_at[:, None] < K // 2), other=0).to(tl.int32)
    high_at = K // 2 + k0 // 4 + tl.arange(0, BLOCK_K // 4)
    highs = tl.load(w_ptr + row + high_at[:, None], mask=rows_in & (high_at[:, None] < 3 * K // 4), other=0).to(tl.int32)
    lows = tl.reshape(lows, (G, 2, 4, BLOCK_N))                        # byte 4c + i of group g
    highs = tl.reshape(highs, (G, 1, 4, BLOCK_N))                      # value 4c + i's top bits at 2c
    c2 = 2 * tl.arange(0, 2)[None, :, None, None]
    first = exact_float((lows & 15) | (((highs >> c2) & 3) << 4), 32.0)
    second = exact_float((lows >> 4) | (((highs >> (c2 + 4)) & 3) << 4), 32.0)
    g = k0 // 16 + tl.arange(0, G)
    scales = tl.load((w_ptr + row + 3 * K // 4 + g[:, None]).to(tl.pointer_type(tl.int8)),
                     mask=rows_in & (g[:, None] * 16 < K), other=0).to(tl.float32)          # [G, BLOCK_N]
    s = k0 // 256 + tl.arange(0, BLOCK_K // 256)
    d = f16(w_ptr, row + 13 * K // 16 + 2 * s[:, None], rows_in & (s[:, None] * 256 < K))  # [BLOCK_K // 256, BLOCK_N]
    scale = tl.reshape(tl.reshape(scales, (BLOCK_K // 256, 16, BLOCK_N)) * d[:, None, :], (G, BLOCK_N))
    return tl.reshape(first, (G, 8, BLOCK_N)), tl.reshape(second, (G, 8, BLOCK_N)), scale


@triton.jit
def q6_split_tile(w_ptr, n, k0, N, K, ROW_BYTES, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """``W`` ``[BLOCK_K, BLOCK_N]`` float32 of a ``q6_k_split`` weight from input ``k0`` (a multiple of
    256): :func:`q6_split_halves` scaled, each group's two halves joined back into input order."""
    first, second, scale = q6_split_halves(w_ptr, n, k0, N, K, ROW_BYTES, BLOCK_K, BLOCK_N)
    halves = tl.join(first * scale[:, None, :], second * scale[:, None, :])      # [G, 8, BLOCK_N, 2]
    return tl.reshape(tl.permute(halves, (0, 3, 1, 2)), (BLOCK_K, BLOCK_N))


@triton.jit
def q6_split_inputs(k0, G: tl.constexpr):
    """The inputs of :func:`q6_split_halves`' halves: ``[G, 8]`` each (``16g + j`` and ``16g + 8 + j``)."""
    first = k0 + 16 * tl.arange(0, G)[:, None] + tl.arange(0, 8)[None, :]
    return first, first + 8
