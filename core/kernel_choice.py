"""Which kernels the model calls: the backend's own (contract 1.2's optional ``kernels``) or the
contract's torch references, chosen by ``EngineConfig.kernels``.

Until ``anydev.plugin_api.kernels`` lands this module carries a private copy of the references,
written against the agreed spec (the names, shapes and meaning are the contract's).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from .errors import EngineConfigError

KERNEL_MODES = ("native", "reference")
KERNEL_NAMES = ("write_kv", "paged_decode_attention", "paged_prefill_attention", "rms_norm",
                "fused_add_rms_norm", "rotary_embedding", "silu_and_mul")


def select_kernels(backend, mode: str):
    """The kernel set for ``mode``: "native" takes the backend's kernels where it offers them (the
    references elsewhere), "reference" takes the references only. The result has one attribute per
    kernel and ``describe()`` for the start-up line."""
    if mode not in KERNEL_MODES:
        raise EngineConfigError(f"kernels must be one of {KERNEL_MODES}, got {mode!r}")
    offered = getattr(backend, "kernels", None)
    if mode == "native" and offered is not None:
        return offered()
    return _reference_set()


def _reference_set():
    impl = {name: globals()[name] for name in KERNEL_NAMES}
    return SimpleNamespace(**impl, native=frozenset(),
                           describe=lambda: "kernels: reference (torch) for " + ", ".join(KERNEL_NAMES))


def cos_sin_cache(inv_freq: torch.Tensor, max_pos: int) -> torch.Tensor:
    """[max_pos, D] float32: cat(cos(p * inv_freq), sin(p * inv_freq)) for each position p."""
    freqs = torch.arange(max_pos, dtype=torch.float32, device=inv_freq.device)[:, None] * inv_freq.float()[None]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


# ---- references (the spec's meaning, in torch) -------------------------------------------------

def write_kv(key, value, k_cache, v_cache, slot_mapping) -> None:
    k_flat = k_cache.view(-1, *k_cache.shape[2:])
    v_flat = v_cache.view(-1, *v_cache.shape[2:])
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_flat.index_copy_(0, slots, key[keep].to(k_flat.dtype))
    v_flat.index_copy_(0, slots, value[keep].to(v_flat.dtype))


def _window_mask(key_pos, query_pos, sliding_window):
    allowed = key_pos <= query_pos
    if sliding_window:
        allowed &= key_pos > query_pos - sliding_window
    return allowed


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window):
    B, H, D = q.shape
    _, block_size, KV, _ = k_cache.shape
    width = block_tables.shape[1] * block_size
    tables = block_tables.long()
    keys = k_cache[tables].view(B, width, KV, D).transpose(1, 2)        # [B, KV, width, D]
    values = v_cache[tables].view(B, width, KV, D).transpose(1, 2)
    key_pos = torch.arange(width, device=q.device)
    lens = seq_lens.long()[:, None]
    mask = _window_mask(key_pos[None], lens - 1, sliding_window) & (key_pos[None] < lens)   # [B, width]
    out = F.scaled_dot_product_attention(q[:, :, None], keys, values, attn_mask=mask[:, None, None],
                                         scale=scale, enable_gqa=H != KV)[:, :, 0]
    return torch.where(lens[:, :, None] > 0, out, torch.zeros((), dtype=out.dtype, device=out.device))


def paged_prefill_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window):
    T, H, D = q.shape
    _, block_size, KV, _ = k_cache.shape
    out = torch.empty_like(q)
    cu, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    for b, length in enumerate(lens):
        start, end = cu[b], cu[b + 1]
        if end == start:
            continue
        blocks = block_tables[b, :math.ceil(length / block_size)].long()
        keys = k_cache[blocks].reshape(-1, KV, D)[:length].transpose(0, 1)[None]   # [1, KV, L, D]
        values = v_cache[blocks].reshape(-1, KV, D)[:length].transpose(0, 1)[None]
        query_pos = torch.arange(length - (end - start), length, device=q.device)[:, None]
        mask = _window_mask(torch.arange(length, device=q.device)[None], query_pos, sliding_window)
        o = F.scaled_dot_product_attention(q[start:end].transpose(0, 1)[None], keys, values,
                                           attn_mask=mask[None, None], scale=scale, enable_gqa=H != KV)
        out[start:end] = o[0].transpose(0, 1)
    return out


def rms_norm(x, weight, eps):
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def fused_add_rms_norm(x, residual, weight, eps) -> None:
    residual.add_(x)
    x.copy_(rms_norm(residual, weight, eps))


def rotary_embedding(positions, q, k, cos_sin_cache) -> None:
    half = cos_sin_cache.shape[-1] // 2
    cs = cos_sin_cache[positions]
    cos = torch.cat((cs[:, :half], cs[:, :half]), dim=-1).to(q.dtype)[:, None]
    sin = torch.cat((cs[:, half:], cs[:, half:]), dim=-1).to(q.dtype)[:, None]
    for x in (q, k):
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        x.copy_(x * cos + rotated * sin)


def silu_and_mul(x):
    half = x.shape[-1] // 2
    return F.silu(x[:, :half]) * x[:, half:]
