"""The torch references of contract 1.2's kernels (anydev.plugin_api.kernels) against independent,
naive formulations: per-sequence loops over explicit slot lists, and the engine's own layers."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from anydev.core.models.rope import inverse_frequencies
from anydev.plugin_api import kernels as K


# HF transformers' formulas, as the engine computed them before it called the kernels.
def engine_rms_norm(x, weight, eps):
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def cos_sin(positions, inv_freq, dtype):
    """cos and signed sin [B, S, 1, D] (the first half of sin negated: rotate_half folded in)."""
    freqs = positions[..., None, None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    sin = emb.sin().to(dtype)
    half = sin.shape[-1] // 2
    return emb.cos().to(dtype), torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


def _paged(num_blocks=12, block_size=4, kv=2, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(num_blocks, block_size, kv, d, generator=g)
    v = torch.randn(num_blocks, block_size, kv, d, generator=g)
    return k, v


def _naive_attention(q_rows, positions, k_cache, v_cache, table, scale, window=None):
    """q_rows [n, H, D] at ``positions``; keys read slot by slot through ``table``."""
    block_size, kv = k_cache.shape[1], k_cache.shape[2]
    group = q_rows.shape[1] // kv
    out = torch.zeros_like(q_rows)
    for i, p in enumerate(positions):
        lo = 0 if window is None else max(0, p + 1 - window)
        slots = [table[j // block_size] * block_size + j % block_size for j in range(lo, p + 1)]
        keys = k_cache.view(-1, kv, k_cache.shape[3])[slots]        # [L, KV, D]
        values = v_cache.view(-1, kv, v_cache.shape[3])[slots]
        for h in range(q_rows.shape[1]):
            weights = torch.softmax(keys[:, h // group] @ q_rows[i, h] * scale, dim=0)
            out[i, h] = weights @ values[:, h // group]
    return out


def test_write_kv_writes_real_tokens_and_skips_padding():
    k, v = _paged()
    before_k, before_v = k.clone(), v.clone()
    key, value = torch.randn(4, 2, 8), torch.randn(4, 2, 8)
    slots = torch.tensor([5, -1, 17, -1])
    K.write_kv(key, value, k, v, slots)
    flat_k, flat_v = k.view(-1, 2, 8), v.view(-1, 2, 8)
    assert torch.equal(flat_k[5], key[0]) and torch.equal(flat_k[17], key[2])
    assert torch.equal(flat_v[5], value[0]) and torch.equal(flat_v[17], value[2])
    untouched = torch.ones(flat_k.shape[0], dtype=torch.bool)
    untouched[[5, 17]] = False
    assert torch.equal(flat_k[untouched], before_k.view(-1, 2, 8)[untouched])
    assert torch.equal(flat_v[untouched], before_v.view(-1, 2, 8)[untouched])


def test_write_kv_with_only_padding_changes_nothing():
    k, v = _paged()
    before = k.clone()
    K.write_kv(torch.randn(3, 2, 8), torch.randn(3, 2, 8), k, v, torch.tensor([-1, -1, -1]))
    assert torch.equal(k, before)


@pytest.mark.parametrize("window", [None, 3])
def test_decode_attention_matches_a_slot_by_slot_loop(window):
    k, v = _paged(kv=2)
    tables = torch.tensor([[3, 7, 1], [0, 11, 2], [4, 5, 6]], dtype=torch.int32)
    seq_lens = torch.tensor([9, 4, 0], dtype=torch.int32)
    q = torch.randn(3, 4, 8)
    out = K.paged_decode_attention(q, k, v, tables, seq_lens, 0.3, window)
    for b in range(2):
        want = _naive_attention(q[b:b + 1], [int(seq_lens[b]) - 1], k, v, tables[b].tolist(), 0.3, window)
        torch.testing.assert_close(out[b:b + 1], want)
    assert torch.equal(out[2], torch.zeros(4, 8))   # seq_len 0: padding row


def test_decode_attention_ignores_what_lies_past_the_length():
    k, v = _paged(kv=1)
    tables = torch.tensor([[2, 9]], dtype=torch.int32)
    q = torch.randn(1, 2, 8)
    clean = K.paged_decode_attention(q, k, v, tables, torch.tensor([5], dtype=torch.int32), 1.0)
    k.view(-1, 1, 8)[9 * 4 + 1:] = float("nan")    # the rest of the last page and beyond
    v[9, 1:] = float("nan")
    dirty = K.paged_decode_attention(q, k, v, tables, torch.tensor([5], dtype=torch.int32), 1.0)
    assert torch.equal(clean, dirty)


@pytest.mark.parametrize("window", [None, 4])
def test_prefill_attention_over_a_cached_prefix_matches_the_loop(window):
    k, v = _paged(kv=2)
    tables = torch.tensor([[3, 7, 1], [0, 11, 2], [4, 5, 6]], dtype=torch.int32)
    seq_lens = torch.tensor([10, 3, 6], dtype=torch.int32)
    q_lens = [4, 3, 0]                      # sequence 0 has a 6-token cached prefix; 2 is all cached
    cu = torch.tensor([0, 4, 7, 7], dtype=torch.int32)
    q = torch.randn(7, 4, 8)
    out = K.paged_prefill_attention(q, k, v, cu, seq_lens, tables, 0.25, window)
    for b, n in enumerate(q_lens):
        first, length = int(cu[b]), int(seq_lens[b])
        want = _naive_attention(q[first:first + n], list(range(length - n, length)), k, v,
                                tables[b].tolist(), 0.25, window)
        torch.testing.assert_close(out[first:first + n], want)


def test_the_last_prefill_query_is_a_decode_query():
    k, v = _paged(kv=1)
    tables = torch.tensor([[5, 2, 8]], dtype=torch.int32)
    q = torch.randn(6, 4, 8)
    seq_lens = torch.tensor([11], dtype=torch.int32)
    prefill = K.paged_prefill_attention(q, k, v, torch.tensor([0, 6], dtype=torch.int32), seq_lens, tables, 0.5)
    decode = K.paged_decode_attention(q[-1:], k, v, tables, seq_lens, 0.5)
    torch.testing.assert_close(prefill[-1:], decode)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_the_engines_and_the_fused_form_adds_the_residual_first(dtype):
    x, residual = torch.randn(5, 16).to(dtype), torch.randn(5, 16).to(dtype)
    weight = torch.rand(16).to(dtype)
    assert torch.equal(K.rms_norm(x, weight, 1e-5), engine_rms_norm(x, weight, 1e-5))
    summed = x + residual
    xf, rf = x.clone(), residual.clone()
    K.fused_add_rms_norm(xf, rf, weight, 1e-5)
    assert torch.equal(rf, summed)
    assert torch.equal(xf, engine_rms_norm(summed, weight, 1e-5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scaling", [None, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}])
def test_rotary_embedding_is_the_engines_rope_in_place(dtype, scaling):
    inv_freq = inverse_frequencies(16, 10000.0, scaling)
    cache = K.cos_sin_cache(inv_freq, 300)
    assert cache.shape == (300, 16) and cache.dtype == torch.float32
    positions = torch.tensor([0, 7, 299, 64])
    qkv = torch.randn(4, 3 * 2 + 2, 16).to(dtype)          # a fused view: q and k share a buffer
    q, k = qkv[:, :4], qkv[:, 4:6]
    cos, sin = cos_sin(positions[None], inv_freq, dtype)   # [1, T, 1, D]
    want_q, want_k = apply_rope(q[None], cos, sin)[0], apply_rope(k[None], cos, sin)[0]
    untouched = qkv[:, 6:].clone()
    K.rotary_embedding(positions, q, k, cache)
    assert torch.equal(q, want_q) and torch.equal(k, want_k)
    assert torch.equal(qkv[:, 6:], untouched)


def test_cos_sin_cache_rows_are_cos_then_sin_of_position_times_frequency():
    inv_freq = torch.tensor([1.0, 0.5])
    cache = K.cos_sin_cache(inv_freq, 4)
    torch.testing.assert_close(cache[3], torch.tensor([math.cos(3), math.cos(1.5), math.sin(3), math.sin(1.5)]))


def test_silu_and_mul_multiplies_the_gate_activation_by_up():
    x = torch.randn(3, 10)
    torch.testing.assert_close(K.silu_and_mul(x), F.silu(x[:, :5]) * x[:, 5:])


def test_every_kernel_name_has_a_documented_reference():
    for name in K.KERNEL_NAMES:
        assert K.REFERENCES[name].__doc__ and K.REFERENCES[name].__name__ == name


def test_rotary_write_kv_is_rotary_then_write_kv():
    """The fused reference: the cache receives the rotated keys (not the keys as given)."""
    inv_freq = inverse_frequencies(8, 10000.0, None)
    cache = K.cos_sin_cache(inv_freq, 16)
    positions = torch.tensor([3, 9, 0])
    q, key, value = torch.randn(3, 4, 8), torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    k_cache, v_cache = _paged(num_blocks=3, block_size=4, kv=2, d=8)
    slots = torch.tensor([5, -1, 11])
    key_given = key.clone()
    want_q, want_key, want_k, want_v = q.clone(), key.clone(), k_cache.clone(), v_cache.clone()
    K.rotary_embedding(positions, want_q, want_key, cache)
    K.write_kv(want_key, value, want_k, want_v, slots)
    K.rotary_write_kv(positions, q, key, value, k_cache, v_cache, slots, cache)
    assert torch.equal(q, want_q) and torch.equal(key, want_key)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    assert torch.equal(k_cache.view(-1, 2, 8)[5], key[0]) and not torch.equal(key[0], key_given[0])



def test_qk_norm_rotary_write_kv_normalises_each_head_then_rotates_and_caches():
    """The fused Qwen3 reference: every q and k head RMS-normalised with its own weight (as a row of
    rms_norm), then rotated; the cache receives the normalised, rotated keys and the values."""
    cache = K.cos_sin_cache(inverse_frequencies(8, 10000.0, None), 16)
    positions, slots = torch.tensor([3, 9]), torch.tensor([5, -1])
    qkv = torch.randn(2, 4 + 2 * 2, 8)
    q, key, value = qkv.split((4, 2, 2), dim=1)                  # views of one projection, as the model has
    q_weight, k_weight = torch.rand(8) + 0.5, torch.rand(8) + 0.5
    want_q, want_key = K.rms_norm(q.reshape(-1, 8), q_weight, 1e-6).view(2, 4, 8), \
        K.rms_norm(key.reshape(-1, 8), k_weight, 1e-6).view(2, 2, 8)
    K.rotary_embedding(positions, want_q, want_key, cache)
    k_cache, v_cache = _paged(num_blocks=3, block_size=4, kv=2, d=8)
    v_before = v_cache.clone()
    got_q = K.qk_norm_rotary_write_kv(positions, q, key, value, k_cache, v_cache, slots, cache, q_weight, k_weight, 1e-6)
    assert torch.equal(got_q, want_q)
    assert torch.equal(k_cache.view(-1, 2, 8)[5], want_key[0]) and torch.equal(v_cache.view(-1, 2, 8)[5], value[0])
    v_before.view(-1, 2, 8)[5] = value[0]
    assert torch.equal(v_cache, v_before)                         # the padding token wrote nothing
