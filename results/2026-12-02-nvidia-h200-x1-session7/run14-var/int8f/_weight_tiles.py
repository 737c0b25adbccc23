"""Loading a ``[BLOCK_K, BLOCK_N]`` tile of a linear layer's weight as float32, for every weight format
of :mod:`anydev.plugin_api.weight_formats` (whose docstring gives the byte layouts read here). The
per-output-channel scales of ``int8``/``fp8_e4m3`` are not applied here: they factor out of the sum
(the linear kernel multiplies the accumulator once).

The GGUF quants become floats by the exponent trick (``(u | 0x4B000000)`` read as float32 is ``2**23
+ u``): an integer and a float operation instead of a conversion instruction, which the GPUs run at a
fraction of their float rate."""
from __future__ import annotations

from ._common import tl, triton

# Format codes (constexpr): DENSE is a float weight of the activations' dtype.
DENSE, INT8, FP8_E4M3, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K = range(8)
CODES = {"dense": DENSE, "int8": INT8, "fp8_e4m3": FP8_E4M3, "q8_0": Q8_0, "q4_0": Q4_0, "q4_1": Q4_1,
         "q4_k": Q4_K, "q6_k": Q6_K}


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
def byte(ptr, offset, mask):
    return tl.load(ptr + offset, mask=mask, other=0).to(tl.int32)


@triton.jit
def f16(ptr, offset, mask):
    """The little-endian float16 at (even) byte ``offset``, as float32."""
    return tl.load((ptr + offset).to(tl.pointer_type(tl.float16)), mask=mask, other=0.0).to(tl.float32)


@triton.jit
def weight_tile(w_ptr, n, k, N, K, ROW_BYTES, FORMAT: tl.constexpr):
    """Values ``W[n, k]`` as float32 for ``n`` ``[1, BLOCK_N]`` and ``k`` ``[BLOCK_K, 1]`` (int64);
    0 outside ``n < N``, ``k < K``."""
    mask = (n < N) & (k < K)
    if FORMAT == 0 or FORMAT == 2:                    # dense, fp8_e4m3: one element per value
        w = tl.load(w_ptr + n * K + k, mask=mask, other=0.0).to(tl.float32)
    elif FORMAT == 1:                                 # int8
        w = int8_float(tl.load(w_ptr + n * K + k, mask=mask, other=0))
    elif FORMAT == 3:                                 # q8_0: d f16, 32 x int8
        at = n * ROW_BYTES + (k // 32) * 34
        w = f16(w_ptr, at, mask) * int8_float(tl.load(w_ptr + at + 2 + k % 32, mask=mask, other=0))
    elif FORMAT == 4:                                 # q4_0: d f16, 16 bytes of nibbles
        j = k % 32
        at = n * ROW_BYTES + (k // 32) * 18
        q = (byte(w_ptr, at + 2 + j % 16, mask) >> ((j // 16) * 4)) & 15
        w = f16(w_ptr, at, mask) * exact_float(q, 8)
    elif FORMAT == 5:                                 # q4_1: d f16, m f16, 16 bytes of nibbles
        j = k % 32
        at = n * ROW_BYTES + (k // 32) * 20
        q = (byte(w_ptr, at + 4 + j % 16, mask) >> ((j // 16) * 4)) & 15
        w = f16(w_ptr, at, mask) * exact_float(q, 0) + f16(w_ptr, at + 2, mask)
    elif FORMAT == 6:                                 # q4_k: d, dmin, 12 scale bytes, 128 bytes of nibbles
        j = k % 256
        sub = j // 32
        at = n * ROW_BYTES + (k // 256) * 144
        q = (byte(w_ptr, at + 16 + (j // 64) * 32 + j % 32, mask) >> ((sub % 2) * 4)) & 15
        a = byte(w_ptr, at + 4 + sub, mask)                          # scales[sub]
        b = byte(w_ptr, at + 8 + sub, mask)                          # scales[sub + 4]
        c = byte(w_ptr, at + 4 + tl.maximum(sub - 4, 0), mask)      # scales[sub - 4]
        low = sub < 4
        sc = tl.where(low, a & 63, (b & 15) | ((c >> 6) << 4))
        m = tl.where(low, b & 63, (b >> 4) | ((a >> 6) << 4))
        w = f16(w_ptr, at, mask) * sc.to(tl.float32) * exact_float(q, 0) - f16(w_ptr, at + 2, mask) * m.to(tl.float32)
    else:                                             # q6_k: ql 128, qh 64, 16 x int8 scales, d f16
        j = k % 256
        half = j // 128
        quarter = (j % 128) // 32
        lane = j % 32
        at = n * ROW_BYTES + (k // 256) * 210
        low = (byte(w_ptr, at + half * 64 + (quarter % 2) * 32 + lane, mask) >> ((quarter // 2) * 4)) & 15
        high = (byte(w_ptr, at + 128 + half * 32 + lane, mask) >> (quarter * 2)) & 3
        scale = tl.load(w_ptr + at + 192 + j // 16, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        w = f16(w_ptr, at + 208, mask) * scale * exact_float(low | (high << 4), 32)
    return w
