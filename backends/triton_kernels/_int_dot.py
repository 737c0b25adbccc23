"""Integer dot products on 8-bit activations, for the GGUF GEMVs at batch 1 (llama.cpp's scheme): a
stretch of the activations rounded to int8 with one scale per 32 inputs and packed four to an int32
word, and :func:`dp4a` (four int8 products and their sum added to an int32).

A GEMV that unpacks every weight to a float spends several instructions a value and is bound by
instruction issue; on words of four packed codes one ``dp4a`` does four multiply-adds. With ``ASM``
(a kernel compiled for an NVIDIA GPU) it is PTX's ``dp4a.s32.s32``; without, the same arithmetic in
Triton's integer operations, which the interpreter (CI) and other vendors' Triton run.

Rounding the activations to int8 (the largest magnitude of each 32 to 127) costs about half a percent
of an output's typical magnitude: within bfloat16's tolerance, not float16's or float32's, so only
bfloat16 activations take this path."""
from __future__ import annotations

from ._common import tl, triton

#: ``1.5 * 2**23``: added to a float32 ``v`` with ``|v| < 2**22``, it leaves ``round(v)`` in the low
#: mantissa bits (``bits - 0x4B400000``), rounded to nearest even.
_ROUND = tl.constexpr(12582912.0)
_ROUND_BITS = tl.constexpr(0x4B400000)
#: Four copies of a nibble mask (low nibbles of each byte of a word).
NIBBLES = tl.constexpr(0x0F0F0F0F)


@triton.jit
def dp4a(a, b, c, ASM: tl.constexpr):
    """``c + sum(a.byte[i] * b.byte[i] for i in 0..3)``, the bytes of int32 ``a`` and ``b`` signed."""
    if ASM:
        return tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, c], dtype=tl.int32,
                                         is_pure=True, pack=1)
    else:
        total = c
        for i in tl.static_range(4):
            total += ((a << (24 - 8 * i)) >> 24) * ((b << (24 - 8 * i)) >> 24)
        return total


@triton.jit
def _or(a, b):
    return a | b


@triton.jit
def block_scales(amax):
    """The int8 scale of a block whose largest magnitude is ``amax`` (``amax / 127``) and its inverse
    (0 for a block of zeros)."""
    return amax * (1.0 / 127.0), tl.where(amax > 0.0, 127.0 / tl.maximum(amax, 1e-30), 0.0)


@triton.jit
def int8_codes(x, inverse):
    """``round(x * inverse)`` as int32 (``|x * inverse| <= 127``), by :data:`_ROUND`."""
    return (x * inverse + _ROUND).to(tl.int32, bitcast=True) - _ROUND_BITS


@triton.jit
def pack4(codes):
    """int8 ``codes`` ``[R, C]`` (int32 in [-128, 127]) as words ``[R, C // 4]``: codes ``4w .. 4w + 3``
    in the bytes of word ``w``, lowest first."""
    R: tl.constexpr = codes.shape[0]
    C: tl.constexpr = codes.shape[1]
    shifted = tl.reshape(codes & 255, (R, C // 4, 4)) << (8 * tl.arange(0, 4))[None, None, :]
    return tl.reduce(shifted, 2, _or)


@triton.jit
def row_codes(rows):
    """Float32 ``rows`` ``[R, C]`` each rounded to int8 by its own scale: (codes ``[R, C]`` int32,
    scales ``[R]``)."""
    scale, inverse = block_scales(tl.max(tl.abs(rows), axis=1))
    return int8_codes(rows, inverse[:, None]), scale


@triton.jit
def quantized_rows(rows):
    """:func:`row_codes` packed: (words ``[R, C // 4]``, scales ``[R]``)."""
    codes, scale = row_codes(rows)
    return pack4(codes), scale


@triton.jit
def quantized_pairs(low, high):
    """Two halves ``[R, C]`` of ``R`` blocks rounded to int8 by one scale a block: (words of ``low``
    and of ``high`` ``[R, C // 4]``, scales ``[R]``, the codes' sums ``[R]`` int32)."""
    amax = tl.maximum(tl.max(tl.abs(low), axis=1), tl.max(tl.abs(high), axis=1))
    scale, inverse = block_scales(amax)
    low_codes = int8_codes(low, inverse[:, None])
    high_codes = int8_codes(high, inverse[:, None])
    return (pack4(low_codes), pack4(high_codes), scale,
            tl.sum(low_codes, axis=1) + tl.sum(high_codes, axis=1))
