"""Quantized weight formats of :func:`anydev.plugin_api.kernels.quantized_linear` (contract 1.5): how each
one is stored on the device and what it means, as torch code that runs on any device.

A linear layer's weight has ``N`` output rows of ``K`` inputs (``y = x @ W.T``). Two families:

* **Per-output-channel** (``int8``, ``fp8_e4m3``): ``weight`` ``[N, K]`` int8 or float8_e4m3fn and
  ``scales`` ``[N]`` float32; ``W[n, k] = weight[n, k] * scales[n]``.
* **GGUF blocks**, exactly as stored in a GGUF file (llama.cpp's ``ggml-quants``; the ``gguf``
  package's ``quants`` module reads the same bytes): ``weight`` ``[N, K // block_elems *
  block_bytes]`` uint8, each row its ``K // block_elems`` blocks back to back; ``scales`` is None.
  Half-precision fields are little-endian float16.

  - ``q8_0``: 32 values in 34 bytes: ``d`` f16, 32 int8 ``q``; ``W = d * q``.
  - ``q4_0``: 32 values in 18 bytes: ``d`` f16, 16 bytes whose low nibbles are values 0-15 and high
    nibbles values 16-31; ``W = d * (q - 8)``.
  - ``q4_1``: 32 values in 20 bytes: ``d`` f16, ``m`` f16, nibbles as ``q4_0``; ``W = d * q + m``.
  - ``q4_k``: 256 values in 144 bytes: ``d`` f16, ``dmin`` f16, 12 bytes packing 8 six-bit scales
    ``sc`` and mins ``m`` (llama.cpp's ``get_scale_min_k4``), 128 bytes of nibbles: values
    ``64c .. 64c+31`` are the low nibbles of bytes ``32c .. 32c+31``, values ``64c+32 .. 64c+63``
    their high nibbles; value ``j`` is in sub-block ``j // 32``; ``W = d * sc * q - dmin * m``.
  - ``q6_k``: 256 values in 210 bytes: ``ql`` 128 bytes (low 4 bits), ``qh`` 64 bytes (high 2 bits),
    16 int8 scales, ``d`` f16. In half ``h`` (values ``128h ..``), for ``l < 32``: value ``l`` is
    ``ql[64h+l]`` low nibble, ``l+32`` is ``ql[64h+32+l]`` low, ``l+64`` is ``ql[64h+l]`` high, ``l+96``
    is ``ql[64h+32+l]`` high, their high bits ``qh[32h+l]`` bits 0-1, 2-3, 4-5, 6-7; value ``j`` uses
    scale ``j // 16``; ``W = d * scale * (q - 32)``.
* **Split rows** (contract 1.11; ``q6_k_split`` 1.12), the values of a GGUF format laid out for wide
  aligned loads, in the same ``[N, row bytes]`` uint8 tensor as the blocks they come from (rows stay
  independent, so any rows of a weight are a weight; :func:`split_rows` makes one from block rows on
  their device):

  - ``q8_0_split``: ``q8_0``'s values; each row its ``K`` int8 ``q`` in input order, then its ``K // 32``
    float16 ``d``; ``W[n, k] = d[k // 32] * q[k]``.
  - ``q6_k_split``: ``q6_k``'s values (``K`` a multiple of 256); each row four planes: ``K // 2`` bytes
    of low nibbles, 8 a 16-value group ``g``, byte ``i`` holding value ``16g + i``'s low 4 bits (low
    nibble) and value ``16g + 8 + i``'s (high nibble); ``K // 4`` bytes of high bits, 4 a group, byte
    ``i`` holding value ``16g + 4c + i``'s top 2 bits at bits ``2c``; ``K // 16`` int8 group scales;
    ``K // 256`` float16 ``d``; ``W[n, k] = d[k // 256] * scale[k // 16] * (q[k] - 32)``.

  A kernel offer takes a split format only where it names it (:data:`SPLIT_FORMATS`), so an engine
  uses one only where a backend asks for it.
"""
from __future__ import annotations

import dataclasses

import torch

from .errors import InvalidArgumentError


@dataclasses.dataclass(frozen=True)
class BlockFormat:
    """A GGUF block format: ``elems`` values stored in ``bytes`` bytes."""
    elems: int
    bytes: int


#: The GGUF block formats, by name (the names of ``gguf.GGMLQuantizationType``, lower case).
BLOCK_FORMATS = {
    "q8_0": BlockFormat(32, 34), "q4_0": BlockFormat(32, 18), "q4_1": BlockFormat(32, 20),
    "q4_k": BlockFormat(256, 144), "q6_k": BlockFormat(256, 210),
}
#: The per-output-channel formats and their storage dtype.
CHANNEL_FORMATS = {"int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}
#: The split-row formats and the GGUF format whose values each holds.
SPLIT_FORMATS = {"q8_0_split": "q8_0", "q6_k_split": "q6_k"}
#: Every weight format of ``quantized_linear``.
WEIGHT_FORMATS = tuple(CHANNEL_FORMATS) + tuple(BLOCK_FORMATS) + tuple(SPLIT_FORMATS)


def source_format(weight_format: str | None) -> str | None:
    """The format a weight of ``weight_format`` is read from a checkpoint in: a split-row format's
    block format (its rows are split after the copy), else itself."""
    return SPLIT_FORMATS.get(weight_format, weight_format)


def row_bytes(weight_format: str, in_features: int) -> int:
    """Bytes of one output row of ``in_features`` values."""
    if weight_format in CHANNEL_FORMATS:
        return in_features
    block = _block(source_format(weight_format))
    if in_features % block.elems:
        raise InvalidArgumentError(f"{weight_format}: in_features {in_features} is not a multiple of its "
                                   f"{block.elems}-value blocks")
    return in_features // block.elems * block.bytes


def check_weight(weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str, in_features: int) -> None:
    """Raise :class:`InvalidArgumentError` unless ``weight``/``scales`` are a valid ``weight_format``
    weight of ``in_features`` inputs."""
    if weight_format not in WEIGHT_FORMATS:
        raise InvalidArgumentError(f"unknown weight format {weight_format!r}; the formats are {', '.join(WEIGHT_FORMATS)}")
    want_dtype = CHANNEL_FORMATS.get(weight_format, torch.uint8)
    shape = (weight.shape[0], row_bytes(weight_format, in_features)) if weight.dim() == 2 else None
    if weight.dtype != want_dtype or tuple(weight.shape) != shape or not weight.is_contiguous():
        raise InvalidArgumentError(
            f"{weight_format} weight of {in_features} inputs: expected a contiguous {want_dtype} [N, {shape and shape[1]}] "
            f"tensor, got {weight.dtype} {tuple(weight.shape)}")
    if weight_format in CHANNEL_FORMATS:
        if scales is None or scales.dtype != torch.float32 or tuple(scales.shape) != (weight.shape[0],):
            raise InvalidArgumentError(f"{weight_format}: scales must be float32 [{weight.shape[0]}] (one per output "
                                       f"row), got {None if scales is None else (scales.dtype, tuple(scales.shape))}")
    elif scales is not None:
        raise InvalidArgumentError(f"{weight_format}: the scales are inside the blocks; pass scales=None")


def dequantize(weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str, in_features: int) -> torch.Tensor:
    """The float32 ``[N, K]`` matrix a ``weight_format`` weight stands for, on the weight's device."""
    check_weight(weight, scales, weight_format, in_features)
    if weight_format in CHANNEL_FORMATS:
        return weight.float() * scales[:, None]
    if weight_format == "q8_0_split":
        codes, d = split_planes(weight, weight_format, in_features)
        return (codes.float().view(-1, in_features // 32, 32) * d.float()[:, :, None]).view(-1, in_features)
    if weight_format == "q6_k_split":       # in _q6_k's order of operations: the same floats
        codes, scales, d = split_planes(weight, weight_format, in_features)
        scale = scales.float().view(-1, in_features // 256, 16) * d.float()[:, :, None]
        return codes.float().sub_(32).view(-1, in_features // 16, 16).mul_(scale.view(-1, in_features // 16, 1)) \
            .view(-1, in_features)
    block = BLOCK_FORMATS[weight_format]
    blocks = weight.view(-1, block.bytes)
    values = _DEQUANTIZE[weight_format](blocks)
    return values.view(weight.shape[0], in_features)


def quantize_per_channel(weight: torch.Tensor, weight_format: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scales)`` of a float ``[N, K]`` weight in ``int8`` or ``fp8_e4m3``, on its device: each row
    scaled so that its largest magnitude is the format's largest value (int8 127, e4m3 448), rounded
    to nearest."""
    if weight_format not in CHANNEL_FORMATS:
        raise InvalidArgumentError(f"quantize_per_channel makes {', '.join(CHANNEL_FORMATS)}, not {weight_format!r}")
    w = weight.float()
    top = 127.0 if weight_format == "int8" else torch.finfo(torch.float8_e4m3fn).max
    scales = (w.abs().amax(dim=1) / top).clamp(min=1e-12)
    scaled = w / scales[:, None]
    q = scaled.round().clamp(-127, 127).to(torch.int8) if weight_format == "int8" else scaled.to(torch.float8_e4m3fn)
    return q.contiguous(), scales.contiguous()


# ---- GGUF blocks ---------------------------------------------------------------------------------

def split_rows(weight: torch.Tensor, split_format: str, in_features: int) -> torch.Tensor:
    """Block rows (``SPLIT_FORMATS[split_format]``) as ``split_format`` rows: a new tensor of the same
    shape, on their device, holding the same codes and scales, moved, not rounded."""
    stored = SPLIT_FORMATS.get(split_format)
    if stored is None:
        raise InvalidArgumentError(f"{split_format!r} is not a split-row format; those are {', '.join(SPLIT_FORMATS)}")
    check_weight(weight, None, stored, in_features)
    N = weight.shape[0]
    blocks = weight.view(N, -1, BLOCK_FORMATS[stored].bytes)
    if split_format == "q8_0_split":
        return torch.cat((blocks[:, :, 2:].reshape(N, in_features), blocks[:, :, :2].reshape(N, -1)), dim=1)
    groups = _q6_k_codes(blocks.reshape(-1, 210)).view(N, -1, 16)            # [N, K // 16, 16] in 0..63
    lows = (groups[:, :, :8] & 15) | ((groups[:, :, 8:] & 15) << 4)
    tops = (groups >> 4).view(N, -1, 4, 4) << torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=weight.device)[:, None]
    highs = tops[:, :, 0] | tops[:, :, 1] | tops[:, :, 2] | tops[:, :, 3]
    return torch.cat((lows.reshape(N, -1), highs.reshape(N, -1), blocks[:, :, 192:208].reshape(N, -1),
                      blocks[:, :, 208:].reshape(N, -1)), dim=1)


def split_planes(weight: torch.Tensor, split_format: str, in_features: int) -> tuple[torch.Tensor, ...]:
    """A split-row weight's planes: ``q8_0_split`` (codes ``[N, K]`` int8, ``d`` ``[N, K // 32]``
    float16); ``q6_k_split`` (codes ``[N, K]`` in 0..63 uint8, group scales ``[N, K // 16]`` int8,
    ``d`` ``[N, K // 256]`` float16)."""
    K, N = in_features, weight.shape[0]
    if split_format == "q8_0_split":
        return weight[:, :K].contiguous().view(torch.int8), weight[:, K:].contiguous().view(torch.float16)
    lows = weight[:, :K // 2].reshape(N, -1, 8)
    highs = weight[:, K // 2:3 * K // 4].reshape(N, -1, 1, 4)
    low4 = torch.cat((lows & 15, lows >> 4), dim=2)                                       # [N, K // 16, 16]
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=weight.device)[:, None]
    top2 = ((highs >> shifts) & 3).reshape(N, -1, 16)
    codes = (low4 | (top2 << 4)).reshape(N, K)
    scales = weight[:, 3 * K // 4:13 * K // 16].contiguous().view(torch.int8)
    return codes, scales, weight[:, 13 * K // 16:].contiguous().view(torch.float16)


def _block(weight_format: str) -> BlockFormat:
    if weight_format not in BLOCK_FORMATS:
        raise InvalidArgumentError(f"unknown weight format {weight_format!r}; the formats are {', '.join(WEIGHT_FORMATS)}")
    return BLOCK_FORMATS[weight_format]


def _f16(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The little-endian float16 at byte ``at`` of each block, as float32 ``[blocks, 1]``."""
    return blocks[:, at:at + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """Bytes ``[B, n]`` -> values ``[B, 2n]``: per run of ``group`` bytes, their low nibbles then their
    high nibbles."""
    runs = qs.reshape(qs.shape[0], -1, 1, group)
    return torch.cat((runs & 0x0F, runs >> 4), dim=2).reshape(qs.shape[0], -1)


# Each dequantizer works in place on the one float32 tensor it makes (no temporaries of that size),
# in the gguf package's order of operations, so the values are the same bit for bit.
def _q8_0(blocks):
    return blocks[:, 2:].contiguous().view(torch.int8).float().mul_(_f16(blocks, 0))


def _q4_0(blocks):
    return _nibbles(blocks[:, 2:], 16).float().sub_(8).mul_(_f16(blocks, 0))


def _q4_1(blocks):
    return _nibbles(blocks[:, 4:], 16).float().mul_(_f16(blocks, 0)).add_(_f16(blocks, 2))


def q4_k_scales(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 12 packed bytes of ``q4_k`` blocks ``[B, 12]`` -> (sc, m), each ``[B, 8]`` in 0..63."""
    low, mins, high = packed[:, 0:4].int(), packed[:, 4:8].int(), packed[:, 8:12].int()
    sc = torch.cat((low & 63, (high & 0x0F) | ((low >> 6) << 4)), dim=1)
    m = torch.cat((mins & 63, (high >> 4) | ((mins >> 6) << 4)), dim=1)
    return sc, m


def _q4_k(blocks):
    sc, m = q4_k_scales(blocks[:, 4:16])
    q = _nibbles(blocks[:, 16:], 32).float().view(-1, 8, 32)
    scale = (_f16(blocks, 0) * sc)[:, :, None]
    offset = (_f16(blocks, 2) * m)[:, :, None]
    return q.mul_(scale).sub_(offset).view(-1, 256)


def _q6_k_codes(blocks):
    """The 6-bit codes (0..63) of ``q6_k`` blocks ``[B, 210]``, uint8 ``[B, 256]`` in value order."""
    ql = _nibbles(blocks[:, 0:128], 64).view(-1, 2, 4, 32)                  # [B, half, quarter, 32]
    qh = blocks[:, 128:192].reshape(-1, 2, 1, 32)
    high = torch.cat([(qh >> shift) & 3 for shift in (0, 2, 4, 6)], dim=2)  # scalar shifts of bytes: vectorised
    return (ql | (high << 4)).view(-1, 256)


def _q6_k(blocks):
    q = _q6_k_codes(blocks).float().sub_(32)
    scale = blocks[:, 192:208].contiguous().view(torch.int8).float() * _f16(blocks, 208)   # [B, 16]
    return q.view(-1, 16, 16).mul_(scale[:, :, None]).view(-1, 256)


_DEQUANTIZE = {"q8_0": _q8_0, "q4_0": _q4_0, "q4_1": _q4_1, "q4_k": _q4_k, "q6_k": _q6_k}
