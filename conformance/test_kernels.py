"""Kernels (contract 1.2, 1.3, 1.5, 1.6, 1.7, 1.8, 1.9, 1.10): every kernel a backend offers natively (``backend.kernels().native``) equals
its torch reference in :mod:`anydev.plugin_api.kernels` over a sweep of shapes and dtypes; and the
engine's greedy tokens with the backend's kernels equal those with the references (a Qwen3 model's also
with every fused kernel run as its parts).

The sweep (``kernel_domains.py``), whatever the torch device: GQA ratios 1, 4 and 8; head sizes 64
and 128; KV block sizes 16 and 32; ragged batches whose context lengths include 1, a block boundary,
one past it and a long context (3000 tokens); norms, activations and linear layers up to the sizes of
a Llama 8B/70B layer; every dtype and weight format of the contract, each checked where the backend
offers it (``KernelSet.supports``, through ``kernel_domains.offered``). ``--quick`` (for Triton's
interpreter in CI) takes 3 of the 12 GQA x head x block combinations, contexts up to 600 and small
linear layers, and its verdict says "(quick sweep)".

Tolerances: the native result (in the input dtype) is compared with the reference computed in float32
from the same inputs; the largest absolute difference must be at most ``TOLERANCE[dtype] x max(1,
largest |reference|)``: 2e-5 for float32, 2e-3 for float16, 2e-2 for bfloat16 (about two units in the
last place of the output: the kernels round once or twice, e.g. attention probabilities to the dtype
before the value product; Triton's interpreter rounds bfloat16 toward zero). ``write_kv`` is a copy
and must be exact.

The fused ``rotary_write_kv`` is checked against rotary_embedding then write_kv: q and k within the
tolerance, the caches holding exactly the rotated k and v in the tokens' slots and nothing else
changed; the fused ``qk_norm_rotary_write_kv`` (1.8) against rms_norm of every q and k head then
rotary_write_kv: the returned q and the cached keys within the tolerance, the cached values exact. Decode attention with a long context is called twice on the same inputs (as a graph replay
calls it): a kernel that keeps state between launches must leave it as it found it.

The linear layers (1.5): ``linear`` and ``quantized_linear`` in every weight format over rows ``T`` of 1
(decode), a few and more than 16 (where an implementation may change method), output counts that are
not a multiple of a power of two, several blocks per row; quantized weights are random bytes whose
float16 scale fields hold small random values, so every bit of a block matters. Every plan anydev's
Triton linear family records for a device (``linear_plans.RECORDED``: a GEMM's blocks, warps, stages and
K split) runs at its own shape and rows on whatever device this is, in bfloat16 (full sweep only): a plan
measured on one card of an architecture is checked on any other of it.

A kernel offered for some inputs only (``KernelOffer``, contract 1.6: e.g. ``quantized_linear`` for
q4_k alone) is checked on the dtypes and weight formats it declares; each other one is skipped as
"not offered" (the engine runs the reference there), never counted as a pass.

Mixture of experts (1.7): ``moe_route`` picks exactly the reference's experts (ties, exact and from
rounding in 16-bit logits, to the lower expert) with weights within the float32 tolerance, with and
without renormalisation; ``moe_linear`` in float and every weight format over rows that share an
expert, all rows on one expert and experts that get no row, whose weights hold NaN (a kernel that
reads an expert no row names fails); ``moe_combine`` (1.10) weights each token's own rows by its own
weights, summed in float32.

Log-probabilities (1.10): ``logprobs`` gives exactly the reference's token ids and its values within
the float32 tolerance (``-inf`` exactly), for logits of every dtype in strided rows whose vocabulary
is no multiple of a power of two, rows of ties (ties at the ``k``-th place and across the places where
an implementation may split a row, kept to the lower ids), rows of ``-inf`` but for a few tokens, and
negative targets; a row holding NaN must not fault; nothing outside ``out`` is written.

Pages a kernel must not read (the rest of a sequence's last page, pages of no sequence, block-table
entries past a sequence's length) hold NaN, so a kernel that reads past a length fails.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import pytest
import torch

from anydev.conformance.kernel_domains import (
    DTYPES, AttentionShape, attention_shapes, linear_shapes, long_context, norm_shapes, offered, silu_shapes, windows,
)
from anydev.conformance.support import require_torch_bridge
from anydev.plugin_api import kernels as reference
from anydev.plugin_api import weight_formats

TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
NUM_KV_HEADS = 2


# ---- fixtures and helpers ------------------------------------------------------------------------

@pytest.fixture
def kernels(backend, device):
    require_torch_bridge(backend)
    return backend.kernels()


@pytest.fixture
def torch_device(device):
    return device.torch_device


def native(kernels, name: str, dtype, weight_format: str | None = None):
    """Kernel ``name`` as the engine calls it, for activations of ``dtype`` (and ``weight_format``);
    skips when the backend runs the reference there: no native ``name``, or one whose offer
    (``KernelOffer``, contract 1.6) does not declare these inputs (reported as not offered)."""
    if name not in kernels.native:
        pytest.skip(f"'{kernels.backend}' offers no native {name} (the engine runs the torch reference)")
    if not offered(kernels, name, dtype, weight_format):
        offer = kernels.offers[name]
        declared = "; ".join(", ".join(axis) for axis in (offer.weight_formats, offer.dtypes) if axis)
        asked = ", ".join(x for x in (weight_format, str(dtype).removeprefix("torch.")) if x)
        pytest.skip(f"not offered: '{kernels.backend}' declares {name} for {declared}, not {asked} "
                    f"(the engine runs the torch reference there)")
    return getattr(kernels, name)


@pytest.fixture
def quick(request) -> bool:
    """``--quick``: the interpreter-sized sweep (``kernel_domains.py``); the verdict says so."""
    return bool(request.config.getoption("anydev_quick"))


def assert_close(got: torch.Tensor, want32: torch.Tensor, dtype, what: str) -> None:
    got32 = got.float().cpu()
    want32 = want32.float().cpu()
    assert got32.shape == want32.shape, f"{what}: shape {tuple(got32.shape)}, expected {tuple(want32.shape)}"
    bound = TOLERANCE[dtype] * max(1.0, want32.abs().max().item() if want32.numel() else 1.0)
    diff = (got32 - want32).abs().nan_to_num(nan=math.inf)
    worst = diff.max().item() if diff.numel() else 0.0
    if worst > bound:
        at = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        pytest.fail(f"{what}: max |native - reference| = {worst:.3g} > {bound:.3g} ({dtype}) at {at}: "
                    f"native {got32[at].item():.6g}, reference {want32[at].item():.6g}", pytrace=False)


class PagedCache:
    """K/V pages of a ragged batch: each sequence's pages in random order, everything no sequence
    owns NaN, block-table entries past a sequence's pages pointing at a NaN page."""

    def __init__(self, seq_lens: list[int], shape: AttentionShape, dtype, torch_device, seed: int):
        gen = torch.Generator().manual_seed(seed)
        bs, d = shape.block_size, shape.head_dim
        pages_of = [math.ceil(n / bs) for n in seq_lens]
        num_blocks = sum(pages_of) + 2                         # + a NaN page + one nobody uses
        order = torch.randperm(num_blocks, generator=gen).tolist()
        nan_page, order = order[0], order[1:]
        width = max(pages_of + [1]) + 1                        # + one table entry past every sequence
        tables = torch.full((len(seq_lens), width), nan_page, dtype=torch.int32)
        k = torch.full((num_blocks, bs, NUM_KV_HEADS, d), math.nan)
        v = torch.full_like(k, math.nan)
        for b, n in enumerate(seq_lens):
            pages, order = order[:pages_of[b]], order[pages_of[b]:]
            tables[b, :len(pages)] = torch.tensor(pages, dtype=torch.int32)
            for pos in range(n):
                k[pages[pos // bs], pos % bs] = torch.randn(NUM_KV_HEADS, d, generator=gen)
                v[pages[pos // bs], pos % bs] = torch.randn(NUM_KV_HEADS, d, generator=gen)
        self.k = k.to(dtype).to(torch_device)
        self.v = v.to(dtype).to(torch_device)
        self.tables = tables.to(torch_device)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32, device=torch_device)


# ---- the kernel set ------------------------------------------------------------------------------

def test_the_backends_kernel_set_names_contract_kernels_and_fills_the_rest_with_references(backend):
    """``backend.kernels()``: what the runtime offers (``DeviceRuntime.kernels``, optional) is a
    subset of the contract's kernels, each callable; every other kernel is the torch reference."""
    kernels = backend.kernels()
    assert kernels.native <= set(reference.KERNEL_NAMES), f"unknown kernels {sorted(kernels.native - set(reference.KERNEL_NAMES))}"
    for name in reference.KERNEL_NAMES:
        kernel = getattr(kernels, name)
        assert callable(kernel), f"{name} is not callable"
        if name not in kernels.native and name not in reference.FUSED:
            assert kernel is reference.REFERENCES[name], f"{name} is neither native nor the reference"
    for name, parts in reference.FUSED.items():
        if name not in kernels.native:
            assert f"{name} as {' + '.join(parts)}" in kernels.describe(), kernels.describe()
    assert kernels.describe().startswith(f"{backend.name} kernels: ")


# ---- attention -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_decode_attention_equals_the_reference(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "paged_decode_attention", dtype)
    for i, shape in enumerate(attention_shapes(quick)):
        bs = shape.block_size
        # 0: a padding row. Short contexts only, then with a long one (long contexts may be split
        # over several programs: both paths are checked).
        short = [1, bs, bs + 1, 0, 2 * bs + 3]
        for seq_lens, window in itertools.product((short, short + [long_context(quick)]),
                                                  windows(shape, i == 0, quick)):
            cache = PagedCache(seq_lens, shape, dtype, torch_device, seed=i)
            heads = NUM_KV_HEADS * shape.group
            q = torch.randn(len(seq_lens), heads, shape.head_dim, generator=torch.Generator().manual_seed(i))
            q = q.to(dtype).to(torch_device)
            scale = shape.head_dim ** -0.5
            got = kernel(q, cache.k, cache.v, cache.tables, cache.seq_lens, scale, window)
            want = reference.paged_decode_attention(q.float(), cache.k.float(), cache.v.float(), cache.tables,
                                                    cache.seq_lens, scale, window)
            assert got.dtype == dtype, f"output dtype {got.dtype}, expected the query's {dtype}"
            where = f"decode attention ({shape}, seq_lens {seq_lens}, window {window})"
            assert_close(got, want, dtype, where)
            if len(seq_lens) > len(short):   # the same call again, as a graph replay makes it (no state kept)
                again = kernel(q, cache.k, cache.v, cache.tables, cache.seq_lens, scale, window)
                assert_close(again, want, dtype, f"{where}, called a second time")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_prefill_attention_equals_the_reference(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "paged_prefill_attention", dtype)
    for i, shape in enumerate(attention_shapes(quick)):
        bs = shape.block_size
        long = long_context(quick)
        # (keys in the pages, new queries): whole prompts, a cached prefix, a one-token chunk, none.
        sequences = [(1, 1), (bs, bs), (bs + 1, 1), (long, 70 if long > 1000 else 9), (2 * bs + 3, bs + 2), (bs, 0)]
        seq_lens = [n for n, _ in sequences]
        q_lens = [m for _, m in sequences]
        for window in windows(shape, i == 0, quick):
            cache = PagedCache(seq_lens, shape, dtype, torch_device, seed=i)
            heads = NUM_KV_HEADS * shape.group
            q = torch.randn(sum(q_lens), heads, shape.head_dim, generator=torch.Generator().manual_seed(i))
            q = q.to(dtype).to(torch_device)
            cu = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32, device=torch_device)
            scale = shape.head_dim ** -0.5
            got = kernel(q, cache.k, cache.v, cu, cache.seq_lens, cache.tables, scale, window)
            want = reference.paged_prefill_attention(q.float(), cache.k.float(), cache.v.float(), cu,
                                                     cache.seq_lens, cache.tables, scale, window)
            assert got.dtype == dtype, f"output dtype {got.dtype}, expected the query's {dtype}"
            assert_close(got, want, dtype, f"prefill attention ({shape}, (keys, queries) {sequences}, window {window})")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_write_kv_writes_exactly_the_reference_slots(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "write_kv", dtype)
    gen = torch.Generator().manual_seed(0)
    for head_dim, block_size in ((64, 16), (128, 32)):
        num_blocks, T = 9, 13
        k = torch.randn(num_blocks, block_size, NUM_KV_HEADS, head_dim, generator=gen).to(dtype).to(torch_device)
        v = torch.randn(k.shape, generator=gen).to(dtype).to(torch_device)
        slots = torch.randperm(num_blocks * block_size, generator=gen)[:T]
        slots[[2, 7]] = -1                                              # padding tokens
        slots = slots.to(torch_device)
        # key and value as views into one fused projection output (strided rows)
        kv = torch.randn(T, 3, NUM_KV_HEADS, head_dim, generator=gen).to(dtype).to(torch_device)
        key, value = kv[:, 0], kv[:, 2]
        want_k, want_v = k.clone(), v.clone()
        reference.write_kv(key, value, want_k, want_v, slots)
        kernel(key, value, k, v, slots)
        where = f"write_kv (head_dim {head_dim}, block_size {block_size}, slots {slots.tolist()})"
        assert torch.equal(k, want_k), f"{where}: k_cache differs from the reference"
        assert torch.equal(v, want_v), f"{where}: v_cache differs from the reference"


# ---- norms, rotary, activation -------------------------------------------------------------------

def _rows(T: int, N: int, dtype, torch_device, seed: int) -> torch.Tensor:
    x = torch.randn(T, N, generator=torch.Generator().manual_seed(seed))
    x[0] *= 1e-3     # mean(x^2) ~ 1e-6 < eps: the eps decides this row
    return x.to(dtype).to(torch_device)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_equals_the_reference(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "rms_norm", dtype)
    for seed, (T, N, eps) in enumerate(norm_shapes(quick)):
        x = _rows(T, N, dtype, torch_device, seed)
        weight = (torch.rand(N, generator=torch.Generator().manual_seed(seed)) + 0.5).to(dtype).to(torch_device)
        got = kernel(x, weight, eps)
        want = reference.rms_norm(x.float(), weight.float(), eps)
        assert_close(got, want, dtype, f"rms_norm (T {T}, N {N}, eps {eps})")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_rms_norm_equals_the_reference(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "fused_add_rms_norm", dtype)
    for seed, (T, N, eps) in enumerate(norm_shapes(quick)[:3]):
        x = _rows(T, N, dtype, torch_device, seed)
        residual = _rows(T, N, dtype, torch_device, seed + 100)
        weight = (torch.rand(N, generator=torch.Generator().manual_seed(seed)) + 0.5).to(dtype).to(torch_device)
        want_x, want_residual = x.float().clone(), residual.float().clone()   # own copies, also for float32
        reference.fused_add_rms_norm(want_x, want_residual, weight.float(), eps)
        kernel(x, residual, weight, eps)
        assert_close(residual, want_residual, dtype, f"fused_add_rms_norm residual (T {T}, N {N})")
        assert_close(x, want_x, dtype, f"fused_add_rms_norm output (T {T}, N {N}, eps {eps})")


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_embedding_equals_the_reference(kernels, torch_device, quick, dtype):
    from anydev.core.models.rope import inverse_frequencies

    kernel = native(kernels, "rotary_embedding", dtype)
    max_pos = 4 * long_context(quick)
    for seed, (head_dim, group, scaling) in enumerate(((64, 4, None), (128, 8, LLAMA3), (128, 1, None))):
        gen = torch.Generator().manual_seed(seed)
        cache = reference.cos_sin_cache(inverse_frequencies(head_dim, 500000.0, scaling), max_pos).to(torch_device)
        T, heads = 9, NUM_KV_HEADS * group
        positions = torch.randint(0, max_pos, (T,), generator=gen)
        positions[:2] = torch.tensor([0, max_pos - 1])
        positions = positions.to(torch_device)
        # q, k and v as views into one fused qkv projection output
        qkv = torch.randn(T, heads + 2 * NUM_KV_HEADS, head_dim, generator=gen).to(dtype).to(torch_device)
        q, k = qkv[:, :heads], qkv[:, heads:heads + NUM_KV_HEADS]
        want_q, want_k = q.float().clone(), k.float().clone()   # own copies, also for float32
        v_before = qkv[:, heads + NUM_KV_HEADS:].clone()
        reference.rotary_embedding(positions, want_q, want_k, cache)
        kernel(positions, q, k, cache)
        where = f"rotary (head_dim {head_dim}, {heads} query heads, scaling {scaling and scaling['rope_type']})"
        assert_close(q, want_q, dtype, f"{where}: q")
        assert_close(k, want_k, dtype, f"{where}: k")
        assert torch.equal(qkv[:, heads + NUM_KV_HEADS:], v_before), f"{where}: wrote outside q and k"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_write_kv_equals_rotary_then_write_kv(kernels, torch_device, quick, dtype):
    """The fused kernel: q and k rotated in place as the reference does (within the dtype's
    tolerance), and the real tokens' slots of both caches hold exactly the rotated k and the v the
    kernel read; padding (slot -1) and every other slot untouched; v and the rest of qkv unchanged."""
    from anydev.core.models.rope import inverse_frequencies

    kernel = native(kernels, "rotary_write_kv", dtype)
    max_pos = 4 * long_context(quick)
    cases = ((64, 4, 16, None), (128, 8, 32, LLAMA3), (128, 1, 16, None), (64, 1, 32, LLAMA3))
    for seed, (head_dim, group, block_size, scaling) in enumerate(cases):
        gen = torch.Generator().manual_seed(seed)
        cos_sin = reference.cos_sin_cache(inverse_frequencies(head_dim, 500000.0, scaling), max_pos).to(torch_device)
        T, heads, num_blocks = 11, NUM_KV_HEADS * group, 5
        positions = torch.randint(0, max_pos, (T,), generator=gen)
        positions[:2] = torch.tensor([0, max_pos - 1])
        slots = torch.randperm(num_blocks * block_size, generator=gen)[:T]
        slots[[1, 6]] = -1                                              # padding tokens
        qkv = torch.randn(T, heads + 2 * NUM_KV_HEADS, head_dim, generator=gen).to(dtype).to(torch_device)
        k_cache = torch.randn(num_blocks, block_size, NUM_KV_HEADS, head_dim, generator=gen).to(dtype).to(torch_device)
        v_cache = torch.randn(k_cache.shape, generator=gen).to(dtype).to(torch_device)
        positions, slots = positions.to(torch_device), slots.to(torch_device)
        q, k, v = qkv[:, :heads], qkv[:, heads:heads + NUM_KV_HEADS], qkv[:, heads + NUM_KV_HEADS:]
        want_q, want_k = q.float().clone(), k.float().clone()
        want_k_cache, want_v_cache = k_cache.float().clone(), v_cache.float().clone()
        v_before = v.clone()
        reference.rotary_write_kv(positions, want_q, want_k, v.float(), want_k_cache, want_v_cache, slots, cos_sin)
        kernel(positions, q, k, v, k_cache, v_cache, slots, cos_sin)
        where = (f"rotary_write_kv (head_dim {head_dim}, {heads} query heads, block_size {block_size}, "
                 f"scaling {scaling and scaling['rope_type']}, slots {slots.tolist()})")
        assert_close(q, want_q, dtype, f"{where}: q")
        assert_close(k, want_k, dtype, f"{where}: k")
        assert torch.equal(v, v_before), f"{where}: changed v (or wrote past k)"
        real = slots >= 0
        flat_k, flat_v = k_cache.view(-1, NUM_KV_HEADS, head_dim), v_cache.view(-1, NUM_KV_HEADS, head_dim)
        assert torch.equal(flat_k[slots[real]], k[real]), f"{where}: the cache's keys are not the rotated k"
        assert torch.equal(flat_v[slots[real]], v[real]), f"{where}: the cache's values are not v"
        untouched = torch.ones(flat_k.shape[0], dtype=torch.bool, device=torch_device)
        untouched[slots[real]] = False
        for got, want, name in ((flat_k, want_k_cache, "k_cache"), (flat_v, want_v_cache, "v_cache")):
            want = want.view(-1, NUM_KV_HEADS, head_dim)
            assert torch.equal(got[untouched].float(), want[untouched]), f"{where}: wrote {name} outside the tokens' slots"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_qk_norm_rotary_write_kv_equals_norms_then_rotary_write_kv(kernels, torch_device, quick, dtype):
    """The fused Qwen3 kernel (1.8): the returned queries and the real tokens' cached keys equal the
    reference's (each head RMS-normalised with its own weight, then rotated) within the dtype's
    tolerance, the cached values are exactly v; padding (slot -1) and every other slot untouched, v
    unchanged. One query head and one key head are all zeros (the norm's eps alone)."""
    from anydev.core.models.rope import inverse_frequencies

    kernel = native(kernels, "qk_norm_rotary_write_kv", dtype)
    max_pos = 4 * long_context(quick)
    cases = ((128, 8, 16, None), (64, 4, 32, LLAMA3), (128, 1, 16, None))
    for seed, (head_dim, group, block_size, scaling) in enumerate(cases):
        gen = torch.Generator().manual_seed(seed)
        cos_sin = reference.cos_sin_cache(inverse_frequencies(head_dim, 1000000.0, scaling), max_pos).to(torch_device)
        T, heads, num_blocks, eps = 11, NUM_KV_HEADS * group, 5, 1e-6
        positions = torch.randint(0, max_pos, (T,), generator=gen)
        positions[:2] = torch.tensor([0, max_pos - 1])
        slots = torch.randperm(num_blocks * block_size, generator=gen)[:T]
        slots[[1, 6]] = -1                                              # padding tokens
        qkv = 3 * torch.randn(T, heads + 2 * NUM_KV_HEADS, head_dim, generator=gen)
        qkv[2, 0] = qkv[3, heads] = 0.0                                 # a query head and a key head of zeros
        qkv = qkv.to(dtype).to(torch_device)
        q_weight, k_weight = (1.0 + 0.3 * torch.randn(2, head_dim, generator=gen)).to(dtype).to(torch_device)
        k_cache = torch.randn(num_blocks, block_size, NUM_KV_HEADS, head_dim, generator=gen).to(dtype).to(torch_device)
        v_cache = torch.randn(k_cache.shape, generator=gen).to(dtype).to(torch_device)
        positions, slots = positions.to(torch_device), slots.to(torch_device)
        q, k, v = qkv[:, :heads], qkv[:, heads:heads + NUM_KV_HEADS], qkv[:, heads + NUM_KV_HEADS:]
        want_k_cache, want_v_cache = k_cache.float().clone(), v_cache.float().clone()
        want_q = reference.qk_norm_rotary_write_kv(positions, q.float().clone(), k.float().clone(), v.float(),
                                                   want_k_cache, want_v_cache, slots, cos_sin, q_weight.float(),
                                                   k_weight.float(), eps)
        v_before = v.clone()
        got_q = kernel(positions, q, k, v, k_cache, v_cache, slots, cos_sin, q_weight, k_weight, eps)
        where = (f"qk_norm_rotary_write_kv (head_dim {head_dim}, {heads} query heads, block_size {block_size}, "
                 f"scaling {scaling and scaling['rope_type']}, slots {slots.tolist()})")
        assert got_q.shape == q.shape and got_q.dtype == dtype, f"{where}: returned {got_q.dtype} {tuple(got_q.shape)}"
        assert_close(got_q, want_q, dtype, f"{where}: the returned queries")
        assert torch.equal(v, v_before), f"{where}: changed v"
        real = slots >= 0
        flat_k, flat_v = k_cache.view(-1, NUM_KV_HEADS, head_dim), v_cache.view(-1, NUM_KV_HEADS, head_dim)
        want_flat_k, want_flat_v = want_k_cache.view(flat_k.shape), want_v_cache.view(flat_v.shape)
        assert_close(flat_k[slots[real]], want_flat_k[slots[real]], dtype, f"{where}: the cache's keys")
        assert torch.equal(flat_v[slots[real]], v[real]), f"{where}: the cache's values are not v"
        untouched = torch.ones(flat_k.shape[0], dtype=torch.bool, device=torch_device)
        untouched[slots[real]] = False
        for got, want, name in ((flat_k, want_flat_k, "k_cache"), (flat_v, want_flat_v, "v_cache")):
            assert torch.equal(got[untouched].float(), want[untouched]), f"{where}: wrote {name} outside the tokens' slots"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_and_mul_equals_the_reference(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "silu_and_mul", dtype)
    for seed, (T, I) in enumerate(silu_shapes(quick)):
        x = (3 * torch.randn(T, 2 * I, generator=torch.Generator().manual_seed(seed))).to(dtype).to(torch_device)
        got = kernel(x)
        assert_close(got, reference.silu_and_mul(x.float()), dtype, f"silu_and_mul (T {T}, I {I})")


# ---- linear layers (contract 1.5) ----------------------------------------------------------------

#: Byte offsets of each GGUF block format's float16 fields: (offset, may be negative).
_F16_FIELDS = {"q8_0": ((0, False),), "q4_0": ((0, False),), "q4_1": ((0, False), (2, True)),
               "q4_k": ((0, False), (2, False)), "q6_k": ((208, False),)}


def random_weight(weight_format: str, N: int, K: int, gen: torch.Generator):
    """(weight, scales) of ``weight_format``: per-channel formats quantized from a random matrix; GGUF
    blocks of random bytes whose float16 fields hold random values in [0.002, 0.02) (signed where the
    format allows it); a split-row format, such blocks' rows split."""
    if weight_format in weight_formats.CHANNEL_FORMATS:
        return weight_formats.quantize_per_channel(torch.randn(N, K, generator=gen), weight_format)
    if weight_format in weight_formats.SPLIT_FORMATS:       # random blocks, their rows split
        blocks, _ = random_weight(weight_formats.SPLIT_FORMATS[weight_format], N, K, gen)
        return weight_formats.split_rows(blocks, weight_format, K), None
    block = weight_formats.BLOCK_FORMATS[weight_format]
    blocks = torch.randint(0, 256, (N, K // block.elems, block.bytes), generator=gen, dtype=torch.uint8)
    for at, signed in _F16_FIELDS[weight_format]:
        value = 0.002 + 0.018 * torch.rand(blocks.shape[:2], generator=gen)
        if signed:
            value = value * torch.where(torch.rand(value.shape, generator=gen) < 0.5, -1.0, 1.0)
        blocks[:, :, at:at + 2] = value.to(torch.float16).view(torch.uint8).view(*value.shape, 2)
    return blocks.view(N, -1).contiguous(), None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_equals_the_reference(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "linear", dtype)
    for seed, (T, N, K) in enumerate(linear_shapes(quick)):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(T, K + 8, generator=gen).to(dtype).to(torch_device)[:, 8:]     # strided rows
        weight = (torch.randn(N, K, generator=gen) / K ** 0.5).to(dtype).to(torch_device)
        got = kernel(x, weight)
        assert got.dtype == dtype and got.is_contiguous(), f"linear (T {T}): output {got.dtype}, contiguous {got.is_contiguous()}"
        assert_close(got, reference.linear(x.float(), weight.float()), dtype, f"linear (T {T}, N {N}, K {K})")


@pytest.mark.parametrize("weight_format", weight_formats.WEIGHT_FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_quantized_linear_equals_the_reference(kernels, torch_device, quick, dtype, weight_format):
    kernel = native(kernels, "quantized_linear", dtype, weight_format)
    for seed, (T, N, K) in enumerate(linear_shapes(quick)):
        gen = torch.Generator().manual_seed(seed)
        weight, scales = random_weight(weight_format, N, K, gen)
        weight = weight.to(torch_device)
        scales = scales.to(torch_device) if scales is not None else None
        x = torch.randn(T, K + 8, generator=gen).to(dtype).to(torch_device)[:, 8:]     # strided rows
        got = kernel(x, weight, scales, weight_format)
        assert got.dtype == dtype and got.is_contiguous(), \
            f"quantized_linear {weight_format} (T {T}): output {got.dtype}, contiguous {got.is_contiguous()}"
        want = reference.quantized_linear(x.float(), weight, scales, weight_format)
        assert_close(got, want, dtype, f"quantized_linear {weight_format} (T {T}, N {N}, K {K})")


def recorded_linear_plans() -> list[tuple]:
    """Every plan of anydev's Triton linear family recorded for some device (``linear_plans.RECORDED``:
    key, plan), or none where Triton is not importable."""
    from anydev.backends.triton_kernels import triton_importable

    if not triton_importable():
        return []
    from anydev.backends.triton_kernels.linear_plans import RECORDED

    return sorted(RECORDED.items(), key=str)


def _plan_id(case) -> str:
    (device, rows, weight_format, N, K), _ = case
    return f"{device.replace(' ', '_')}-{rows}-{weight_format}-{N}x{K}"


@pytest.mark.parametrize("case", recorded_linear_plans(), ids=_plan_id)
def test_every_recorded_linear_plan_equals_the_reference(kernels, torch_device, quick, monkeypatch, case):
    """A plan recorded for any device (one of the same architecture may have measured it) computes the
    reference product here, at its own shape and rows, in bfloat16 (a GGUF format's batch-1 plans are the
    integer-dot GEMV's): the plans of a card this run is not on are checked on one that compiles the
    same kernel."""
    (device, rows, weight_format, N, K), recorded = case
    if quick:
        pytest.skip("a recorded plan is sized for a GPU's GEMM (up to 128256 x 4096): the full sweep runs it")
    from anydev.backends.triton_kernels import linear, linear_plans

    name = "linear" if weight_format == "dense" else "quantized_linear"
    native(kernels, name, torch.bfloat16, None if weight_format == "dense" else weight_format)
    offered, kernel = kernels.offers[name].kernel, getattr(linear, name)
    if kernel not in (offered, getattr(offered, "__wrapped__", None)):
        pytest.skip(f"'{kernels.backend}' runs its own {name}, not anydev's Triton linear family whose plans these are")
    # The family's kernel itself: a backend's own kernel around it (functools.wraps: nvidia's batch-1
    # GEMVs) may take this call before any plan is looked up.
    here = (linear_plans.device_name(torch_device), rows, weight_format, N, K)
    monkeypatch.setitem(linear_plans.RECORDED, here, recorded)
    taken = linear.plan(rows, N, K, weight_format, torch_device, torch.bfloat16)
    assert (taken.block_m, taken.block_n, taken.block_k, taken.num_warps, taken.num_stages) == \
        (recorded[0], recorded[1], recorded[2], recorded[4], recorded[5]), f"plan {recorded} of {device} not taken: {taken}"
    gen = torch.Generator().manual_seed(N + K + rows)
    x = torch.randn(rows, K + 8, generator=gen).bfloat16().to(torch_device)[:, 8:]     # strided rows
    what = f"{name} {weight_format} (T {rows}, N {N}, K {K}) with {device}'s plan {recorded}"
    if weight_format == "dense":
        weight = (torch.randn(N, K, generator=gen) / K ** 0.5).bfloat16().to(torch_device)
        got, want = kernel(x, weight), reference.linear(x.float(), weight.float())
    else:
        weight, scales = random_weight(weight_format, N, K, gen)
        weight = weight.to(torch_device)
        scales = scales.to(torch_device) if scales is not None else None
        got = kernel(x, weight, scales, weight_format)
        want = reference.quantized_linear(x.float(), weight, scales, weight_format)
    assert_close(got, want, torch.bfloat16, what)


def embedding_cases(quick: bool) -> list[tuple[int, int, int]]:
    """(T, N, hidden): decode's one row, a prefill's rows (repeats, the first and last rows of the
    table), widths of whole programs (256 values each) and with a part-filled last one (the k-quants'
    rows are whole super-blocks: theirs are cut to a multiple of 256)."""
    if quick:
        return [(1, 64, 256), (9, 64, 288)]
    return [(1, 512, 4096), (37, 256, 800), (300, 128, 2048)]


@pytest.mark.parametrize("weight_format", weight_formats.WEIGHT_FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_quantized_embedding_equals_the_reference(kernels, torch_device, quick, dtype, weight_format):
    kernel = native(kernels, "quantized_embedding", dtype, weight_format)
    for seed, (T, N, hidden) in enumerate(embedding_cases(quick)):
        if weight_format in weight_formats.BLOCK_FORMATS and weight_formats.BLOCK_FORMATS[weight_format].elems == 256:
            hidden -= hidden % 256
        gen = torch.Generator().manual_seed(seed)
        weight, scales = random_weight(weight_format, N, hidden, gen)
        weight = weight.to(torch_device)
        scales = scales.to(torch_device) if scales is not None else None
        ids = torch.cat((torch.tensor([N - 1, 0]), torch.randint(0, N, (max(0, T - 2),), generator=gen)))[:T]
        ids = ids.to(torch_device)
        got = kernel(ids, weight, scales, weight_format, hidden, dtype)
        what = f"quantized_embedding {weight_format} (T {T}, N {N}, hidden {hidden})"
        assert got.dtype == dtype and got.is_contiguous() and got.device == weight.device, \
            f"{what}: output {got.dtype} on {got.device}, contiguous {got.is_contiguous()}"
        assert_close(got, reference.quantized_embedding(ids, weight, scales, weight_format, hidden, torch.float32),
                     dtype, what)


# ---- mixture of experts (contract 1.7) -----------------------------------------------------------

def route_cases(quick: bool) -> list[tuple[int, int, int]]:
    """(T, E, top_k): decode's one token, a batch, Qwen3-30B-A3B's 128 experts top 8."""
    if quick:
        return [(1, 8, 2), (3, 128, 8)]
    return [(1, 8, 2), (32, 60, 4), (257, 128, 8)]


@pytest.mark.parametrize("renormalize", [False, True], ids=["plain", "renormalized"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_moe_route_equals_the_reference(kernels, torch_device, quick, dtype, renormalize):
    kernel = native(kernels, "moe_route", dtype)
    for seed, (T, E, k) in enumerate(route_cases(quick)):
        logits = (2 * torch.randn(T, E, generator=torch.Generator().manual_seed(seed))).to(dtype).to(torch_device)
        weights, ids = kernel(logits, k, renormalize)
        want_weights, want_ids = reference.moe_route(logits, k, renormalize)
        what = f"moe_route (T {T}, E {E}, top {k}, renormalize {renormalize})"
        assert ids.dtype == torch.int64 and weights.dtype == torch.float32, f"{what}: {ids.dtype}, {weights.dtype}"
        assert torch.equal(ids.cpu(), want_ids.cpu()), f"{what}: experts {ids.cpu().tolist()} vs {want_ids.cpu().tolist()}"
        assert_close(weights, want_weights, torch.float32, what)


@pytest.mark.parametrize("renormalize", [False, True], ids=["plain", "renormalized"])
def test_moe_route_breaks_ties_to_the_lower_expert(kernels, torch_device, renormalize):
    """Equal logits: the lower expert index first, as the reference orders them."""
    kernel = native(kernels, "moe_route", torch.float32)
    logits = torch.tensor([[0.0] * 8,                                     # all equal
                           [1.0, 3.0, 3.0, 0.0, 3.0, 2.0, 2.0, -1.0],     # a tie across the top-k boundary
                           [5.0, -2.0, -2.0, -2.0, -2.0, -2.0, -2.0, 5.0]], device=torch_device)
    weights, ids = kernel(logits, 3, renormalize)
    assert ids.cpu().tolist() == [[0, 1, 2], [1, 2, 4], [0, 7, 1]], f"ties chose {ids.cpu().tolist()}"
    assert_close(weights, reference.moe_route(logits, 3, renormalize)[0], torch.float32, "moe_route ties")


def moe_linear_shapes(quick: bool) -> list[tuple[int, int, int, int]]:
    """(R, E, N, K): decode's top-k rows at Qwen3-30B-A3B's expert widths (32 of its 128 experts: the
    quantized stacks are made on the host, once a shape), a batch of rows (more than 16: where an
    implementation may group the rows by expert); K a multiple of 256."""
    if quick:
        return [(5, 4, 24, 256), (21, 4, 24, 256)]
    return [(8, 32, 1536, 2048), (8, 32, 2048, 768), (256, 16, 384, 1024)]


def expert_ids_of(R: int, E: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Rows that share experts with experts no row names (every other one left out), and all rows on
    the last expert."""
    some = torch.arange(0, E, 2)[torch.randint(0, len(range(0, E, 2)), (R,), generator=gen)]
    return [some, torch.full((R,), E - 1)]


@functools.lru_cache(maxsize=None)
def _quantized_stack(weight_format: str, E: int, N: int, K: int, seed: int):
    """(weight, scales) of ``E`` random experts in ``weight_format``, made once for every dtype and
    expert choice of one shape (callers poison a copy; about 1 GB of host memory for all of them)."""
    gen = torch.Generator().manual_seed(1000 + seed)
    parts = [random_weight(weight_format, N, K, gen) for _ in range(E)]
    return torch.stack([p[0] for p in parts]), None if parts[0][1] is None else torch.stack([p[1] for p in parts])


def stacked_weights(weight_format, E: int, N: int, K: int, dtype, gen: torch.Generator, unused: torch.Tensor,
                    seed: int = 0):
    """(weight, scales) of ``E`` experts in ``weight_format`` (None: floats), the experts ``unused``
    poisoned with NaN (their float values, scales or float16 block fields)."""
    if weight_format is None:
        weight = (torch.randn(E, N, K, generator=gen) / K ** 0.5).to(dtype)
        weight[unused] = math.nan
        return weight, None
    weight, scales = (None if t is None else t.clone() for t in _quantized_stack(weight_format, E, N, K, seed))
    if scales is not None:
        scales[unused] = math.nan
    else:
        blocks = weight.view(E, N, -1, weight_formats.BLOCK_FORMATS[weight_format].bytes)
        for at, _ in _F16_FIELDS[weight_format]:
            blocks[unused, :, :, at:at + 2] = torch.tensor([0x00, 0x7E], dtype=torch.uint8)   # float16 NaN
    return weight, scales


@pytest.mark.parametrize("weight_format", (None, *weight_formats.WEIGHT_FORMATS), ids=lambda f: f or "float")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_moe_linear_equals_the_reference(kernels, torch_device, quick, dtype, weight_format):
    kernel = native(kernels, "moe_linear", dtype, weight_format)
    for seed, (R, E, N, K) in enumerate(moe_linear_shapes(quick)):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(R, K + 8, generator=gen).to(dtype).to(torch_device)[:, 8:]      # strided rows
        for ids in expert_ids_of(R, E, gen):
            unused = torch.tensor(sorted(set(range(E)) - set(ids.tolist())), dtype=torch.int64)
            weight, scales = stacked_weights(weight_format, E, N, K, dtype, gen, unused, seed)
            weight, ids = weight.to(torch_device), ids.to(torch_device)
            scales = None if scales is None else scales.to(torch_device)
            got = kernel(x, weight, scales, weight_format, ids)
            what = f"moe_linear {weight_format or 'float'} (R {R}, E {E}, N {N}, K {K}, experts {sorted(set(ids.tolist()))})"
            assert got.dtype == dtype and got.is_contiguous(), f"{what}: output {got.dtype}, contiguous {got.is_contiguous()}"
            x32 = x.float()
            want = reference.moe_linear(x32, weight.float() if weight_format is None else weight, scales,
                                        weight_format, ids)
            assert_close(got, want, dtype, what)


def combine_cases(quick: bool) -> list[tuple[int, int, int]]:
    """(T, top_k, N): decode's one token and a batch; one, two and eight experts a token; N odd (one
    program's outputs and a part-filled last one), Qwen3-30B-A3B's hidden 2048 in the full sweep."""
    Ns = (333,) if quick else (333, 2048, 4097)
    return [(T, top_k, N) for N in Ns for T in (1, 37) for top_k in (1, 2, 8)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_moe_combine_equals_the_reference(kernels, torch_device, quick, dtype):
    """Each token's rows weighted by their own weights (random, not summing to 1), in float32."""
    kernel = native(kernels, "moe_combine", dtype)
    for seed, (T, top_k, N) in enumerate(combine_cases(quick)):
        gen = torch.Generator().manual_seed(seed)
        rows = torch.randn(T * top_k, N + 8, generator=gen).to(dtype).to(torch_device)[:, 8:]     # strided rows
        weights = torch.rand(T, top_k, generator=gen).to(torch_device)
        got = kernel(rows, weights)
        what = f"moe_combine (T {T}, top_k {top_k}, N {N})"
        assert got.dtype == dtype and got.is_contiguous(), f"{what}: output {got.dtype}, contiguous {got.is_contiguous()}"
        assert_close(got, reference.moe_combine(rows.float(), weights), dtype, what)


# ---- log-probabilities (contract 1.10) ----------------------------------------------------------

def logprobs_cases(quick: bool) -> list[tuple[int, int, int]]:
    """(R, V, k): one row, a few and a batch; k 0 (the chosen token only), 1, 5 and the most, 20;
    vocabularies no multiple of a power of two, a real one's (Qwen's 151936) in the full sweep."""
    if quick:
        return [(1, 2053, 20), (3, 2053, 5), (3, 1031, 0), (64, 777, 1)]
    return [(R, V, k) for V in (2053, 151936) for R in (1, 3, 64) for k in (0, 1, 5, 20)]


def run_logprobs(kernel, logits: torch.Tensor, targets: torch.Tensor, k: int, what: str) -> torch.Tensor:
    """``kernel``'s packed rows, its ``out`` a view into a larger buffer whose margins must stay as
    they were."""
    R, width = logits.shape[0], 1 + 2 * k
    buffer = torch.full((R * width + 16,), 12345.0, device=logits.device)
    out = buffer[8:8 + R * width].view(R, width)
    got = kernel(logits, targets, k, out)
    assert got is out or (got.data_ptr() == out.data_ptr() and got.shape == out.shape), \
        f"{what}: logprobs must write into out and return it"
    margins = torch.cat((buffer[:8], buffer[-8:])).cpu()
    assert torch.all(margins == 12345.0), f"{what}: logprobs wrote outside out"
    return out


def assert_logprobs_equal(got: torch.Tensor, want: torch.Tensor, k: int, what: str, rows=None) -> None:
    """The ids exactly, infinite values exactly, finite ones within the float32 tolerance (of ``rows``:
    None, every row)."""
    got, want = got.cpu(), want.cpu()
    if rows is not None:
        got, want = got[rows], want[rows]
    ids, want_ids = got[:, 1 + k:], want[:, 1 + k:]
    if not torch.equal(ids, want_ids):
        bad = int((ids != want_ids).any(dim=1).nonzero()[0])
        pytest.fail(f"{what}: row {bad}'s top ids {ids[bad].long().tolist()}, reference "
                    f"{want_ids[bad].long().tolist()} (ties: the lower id first)", pytrace=False)
    values, want_values = got[:, :1 + k], want[:, :1 + k]
    infinite = torch.isinf(want_values)
    assert torch.equal(values[infinite], want_values[infinite]), \
        f"{what}: log-probabilities of -inf logits are not -inf: {values[infinite].tolist()}"
    assert_close(values.where(~infinite, 0.0), want_values.where(~infinite, 0.0), torch.float32, what)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_logprobs_equals_the_reference(kernels, torch_device, quick, dtype):
    kernel = native(kernels, "logprobs", dtype)
    for seed, (R, V, k) in enumerate(logprobs_cases(quick)):
        gen = torch.Generator().manual_seed(seed)
        logits = (3 * torch.randn(R, V + 8, generator=gen)).to(dtype).to(torch_device)[:, 8:]     # strided rows
        targets = torch.randint(0, V, (R,), generator=gen)
        targets[::2] = -1                                 # a failed row's code: reads token 0
        targets = targets.to(torch_device)
        what = f"logprobs {dtype} (R {R}, V {V}, k {k})"
        got = run_logprobs(kernel, logits, targets, k, what)
        want = reference.logprobs(logits, targets, k, torch.empty_like(got))
        assert_logprobs_equal(got, want, k, what)


def special_logits(V: int) -> torch.Tensor:
    """Rows of ties and infinities (float32; exact in every dtype): all equal (``-0.0`` among them);
    a few values repeated everywhere; a largest value repeated across token 1024; ``-inf`` but for
    three tokens; and a row holding NaN."""
    gen = torch.Generator().manual_seed(7)
    rows = torch.zeros(5, V)
    rows[0, 1::3] = -0.0
    rows[1] = torch.randint(-3, 4, (V,), generator=gen).float()
    rows[2] = torch.randint(-8, 0, (V,), generator=gen).float()
    rows[2, 1020:1030] = 2.0
    rows[2, V - 1] = 2.0
    rows[3] = -math.inf
    rows[3, [V - 1, 700, 5]] = torch.tensor([1.0, 3.0, 2.0])
    rows[4] = torch.randn(V, generator=gen)
    rows[4, 100:110] = math.nan
    return rows


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_logprobs_keeps_the_lower_ids_of_tied_logits(kernels, torch_device, dtype):
    """Ties to the lower id, within the list and at its last place; ``-inf`` logits ranked as values;
    negative targets read token 0; a NaN row (not compared) does not fault."""
    kernel = native(kernels, "logprobs", dtype)
    V = 1531
    logits = special_logits(V).to(dtype).to(torch_device)
    targets = torch.tensor([3, -1, V - 1, -7, 2], device=torch_device)
    for k in (5, 20):
        what = f"logprobs ties {dtype} (V {V}, k {k})"
        got = run_logprobs(kernel, logits, targets, k, what)
        ids = got[:, 1 + k:].long().cpu().tolist()
        assert ids[0] == list(range(k)), f"{what}: equal logits chose {ids[0]}, not the lowest ids"
        assert ids[2][:5] == [1020, 1021, 1022, 1023, 1024], f"{what}: the largest of a row, tied, chose {ids[2][:5]}"
        assert ids[3][:5] == [700, 5, V - 1, 0, 1], f"{what}: a row of -inf but three chose {ids[3][:5]}"
        want = reference.logprobs(logits, targets, k, torch.empty_like(got))
        assert_logprobs_equal(got, want, k, what, rows=[0, 1, 2, 3])


# ---- the engine ----------------------------------------------------------------------------------

def test_engine_greedy_tokens_with_the_backends_kernels_equal_the_references(backend, kernels):
    """The demo model (float32, one rank): greedy tokens with ``EngineConfig(kernels="native")``
    equal those with ``kernels="reference"``."""
    import dataclasses as dc

    from anydev.conformance.engine_support import engine_config, greedy_tokens
    from anydev.conformance.support import require_torch_bridge
    from anydev.core import EngineConfig

    if not kernels.native:
        pytest.skip(f"'{backend.name}' offers no native kernels: the engine runs the references either way")
    if "kernels" not in {f.name for f in dc.fields(EngineConfig)}:
        pytest.skip("this engine has no EngineConfig(kernels='native'|'reference') switch yet")
    require_torch_bridge(backend)
    with_native = greedy_tokens(engine_config(backend, 1, kernels="native"))
    with_reference = greedy_tokens(engine_config(backend, 1, kernels="reference"))
    assert all(with_reference), "the reference run generated nothing"
    assert with_native == with_reference, f"native kernels {with_native} vs references {with_reference}"


def test_engine_greedy_tokens_of_a_qwen3_model_fused_unfused_and_reference_are_equal(backend, kernels):
    """A tiny random Qwen3 (float32, one rank): greedy tokens with the backend's kernels (its fused
    ``qk_norm_rotary_write_kv`` where it offers it), with every fused kernel run as its parts
    (``kernels="unfused"``) and with the references are the same."""
    from anydev.conformance.engine_support import engine_config, qwen3_model
    from anydev.core import InferEngine, SamplingParams

    if "qk_norm_rotary_write_kv" not in kernels.native:
        pytest.skip(f"'{backend.name}' offers no native qk_norm_rotary_write_kv: the engine runs its parts either way")
    prompts, tokens = [list(range(3, 4)), list(range(3, 12))], {}     # a batch of 2 decodes: strided q/k views
    for mode in ("native", "unfused", "reference"):
        with InferEngine(qwen3_model(), engine_config(backend, 1, kernels=mode, max_model_len=128)) as engine:
            tokens[mode] = [o.token_ids for o in engine.generate_ids(prompts, SamplingParams(max_new_tokens=5,
                                                                                           ignore_eos=True))]
    assert all(tokens["reference"]), "the reference run generated nothing"
    assert tokens["native"] == tokens["unfused"] == tokens["reference"], f"tokens by kernels: {tokens}"


def test_engine_greedy_tokens_of_a_moe_model_with_the_backends_kernels_equal_the_references(backend, kernels):
    """A tiny random Qwen3-MoE (float32, one rank, one layer; 8 experts, top 2): greedy tokens with the backend's
    kernels equal those with the references (the MoE kernels inside the model, decode graphs included)."""
    from anydev.conformance.engine_support import engine_config
    from anydev.core import InferEngine, SamplingParams
    from anydev.core.loading.random_weights import LLAMA_TINY, TINY_EXTRA, model_config, random_checkpoint

    if not {"moe_route", "moe_linear", "moe_combine"} & kernels.native:
        pytest.skip(f"'{backend.name}' offers no native MoE kernel: the engine runs the references either way")
    checkpoint = random_checkpoint(model_config("qwen3_moe", max_position_embeddings=256,
                                                **dict(LLAMA_TINY, **TINY_EXTRA["qwen3_moe"], num_hidden_layers=1)))
    prompts = [list(range(3, 3 + n)) for n in (1, 9)]
    tokens = {}
    for mode in ("native", "reference"):
        with InferEngine(checkpoint, engine_config(backend, 1, kernels=mode, max_model_len=128)) as engine:
            tokens[mode] = [o.token_ids for o in engine.generate_ids(prompts, SamplingParams(max_new_tokens=8,
                                                                                           ignore_eos=True))]
    assert tokens["native"] == tokens["reference"], f"native kernels {tokens['native']} vs references {tokens['reference']}"
