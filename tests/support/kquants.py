"""Minimal Q4_K and Q6_K encoders (the gguf package only decodes K-quants).

Plain round-to-nearest per block, no error search: enough to write valid test files whose weights are
close to the originals. The layouts are the inverse of ``gguf.quants.Q4_K/Q6_K.dequantize_blocks``.
"""
from __future__ import annotations

import numpy as np

QK_K = 256


def _f16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16)


def quantize_q4_k(rows: np.ndarray) -> np.ndarray:
    """float32 [..., n*256] → uint8 [..., n*144]: 8 sub-blocks of 32, value = d*sc*q - dmin*m."""
    blocks = rows.reshape(-1, 8, 32).astype(np.float32)
    n = blocks.shape[0]
    low = np.minimum(blocks.min(axis=-1), 0.0)              # per sub-block minimum, at most 0
    step = (blocks.max(axis=-1) - low) / 15.0
    d = _f16(np.maximum(step.max(axis=-1), 1e-8) / 63.0)
    dmin = _f16(np.maximum((-low).max(axis=-1), 1e-8) / 63.0)
    sc = np.clip(np.rint(step / d.astype(np.float32)[:, None]), 1, 63).astype(np.uint8)
    m = np.clip(np.rint(-low / dmin.astype(np.float32)[:, None]), 0, 63).astype(np.uint8)
    scale = (d.astype(np.float32)[:, None] * sc)[..., None]
    offset = (dmin.astype(np.float32)[:, None] * m)[..., None]
    q = np.clip(np.rint((blocks + offset) / scale), 0, 15).astype(np.uint8)     # [n, 8, 32]

    packed_scales = np.empty((n, 12), np.uint8)
    packed_scales[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed_scales[:, 4:8] = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    packed_scales[:, 8:12] = (sc[:, 4:] & 0x0F) | ((m[:, 4:] & 0x0F) << 4)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, 128)   # sub-blocks 2k (low) and 2k+1 (high)
    out = np.concatenate([d.reshape(n, 1).view(np.uint8), dmin.reshape(n, 1).view(np.uint8), packed_scales, qs], axis=1)
    return out.reshape(*rows.shape[:-1], rows.shape[-1] // QK_K * 144)


def quantize_q6_k(rows: np.ndarray) -> np.ndarray:
    """float32 [..., n*256] → uint8 [..., n*210]: 16 sub-blocks of 16, value = d*sc*(q-32)."""
    blocks = rows.reshape(-1, 16, 16).astype(np.float32)
    n = blocks.shape[0]
    step = np.abs(blocks).max(axis=-1) / 31.0
    d = _f16(np.maximum(step.max(axis=-1), 1e-8) / 127.0)
    sc = np.clip(np.rint(step / d.astype(np.float32)[:, None]), 1, 127).astype(np.int8)
    scale = (d.astype(np.float32)[:, None] * sc)[..., None]
    q = (np.clip(np.rint(blocks / scale), -32, 31) + 32).astype(np.uint8).reshape(n, QK_K)

    low, high = q & 0x0F, q >> 4
    low = low.reshape(n, 2, 2, 64)                          # [half, nibble, 64]
    ql = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(n, 128)
    high = high.reshape(n, 2, 4, 32)                        # [half, 2-bit slot, 32]
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)).reshape(n, 64)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d.reshape(n, 1).view(np.uint8)], axis=1)
    return out.reshape(*rows.shape[:-1], rows.shape[-1] // QK_K * 210)
