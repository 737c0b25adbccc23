"""Mutants of the device kernels (contract 1.2): each offers one natively implemented kernel with one
fault (torch code, so the runs are fast); the kernels group must catch it. Those at the end offer
their kernel for some inputs only (a ``KernelOffer``, contract 1.6) and are wrong on what they declare."""
from __future__ import annotations

import torch

from anydev.backends.cpu.runtime import CpuRuntime
from anydev.plugin_api import KernelOffer
from anydev.plugin_api import kernels as reference

from . import mutant

CHECKS = ["test_kernels.py"]


class _OneKernel(CpuRuntime):
    """A cpu runtime offering one native kernel, ``_kernel`` (a staticmethod of the subclass)."""

    kernels_note = "mutant"

    def kernels(self):
        return {type(self)._kernel.__name__: type(self)._kernel}


@mutant("decode-attention-drops-last-page", checks=CHECKS)
class DecodeAttentionDropsLastPage(_OneKernel):
    """paged_decode_attention ignores the last page of every sequence longer than one page."""

    @staticmethod
    def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window=None):
        block_size = k_cache.shape[1]
        full_pages = torch.where(seq_lens > block_size, (seq_lens - 1) // block_size * block_size, seq_lens)
        return reference.paged_decode_attention(q, k_cache, v_cache, block_tables, full_pages.to(seq_lens.dtype),
                                                scale, sliding_window)

    _kernel = paged_decode_attention


@mutant("decode-attention-interleaved-gqa", checks=CHECKS)
class DecodeAttentionInterleavedGqa(_OneKernel):
    """paged_decode_attention maps query head h to KV head h % KV instead of h // (H // KV)."""

    @staticmethod
    def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window=None):
        B, H, D = q.shape
        kv = k_cache.shape[2]
        order = torch.arange(H).view(kv, H // kv).t().reshape(H)     # h % KV layout, then back
        out = reference.paged_decode_attention(q[:, order], k_cache, v_cache, block_tables, seq_lens, scale, sliding_window)
        return out[:, torch.argsort(order)]

    _kernel = paged_decode_attention


@mutant("prefill-attention-not-causal", checks=CHECKS)
class PrefillAttentionNotCausal(_OneKernel):
    """paged_prefill_attention lets every new query see all the sequence's keys (no causal mask)."""

    @staticmethod
    def paged_prefill_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window=None):
        out = torch.empty_like(q)
        starts = cu_seqlens_q.tolist()
        for b in range(len(seq_lens)):
            for t in range(starts[b], starts[b + 1]):
                out[t:t + 1] = reference.paged_decode_attention(q[t:t + 1], k_cache, v_cache, block_tables[b:b + 1],
                                                                seq_lens[b:b + 1], scale, sliding_window)
        return out

    _kernel = paged_prefill_attention


@mutant("write-kv-writes-padding", checks=CHECKS)
class WriteKvWritesPadding(_OneKernel):
    """write_kv indexes the cache with the slot mapping as given, so padding (-1) overwrites the last slot."""

    @staticmethod
    def write_kv(key, value, k_cache, v_cache, slot_mapping):
        k_cache.view(-1, *k_cache.shape[2:])[slot_mapping] = key
        v_cache.view(-1, *v_cache.shape[2:])[slot_mapping] = value

    _kernel = write_kv


@mutant("rms-norm-without-eps", checks=CHECKS)
class RmsNormWithoutEps(_OneKernel):
    """rms_norm leaves eps out of the root mean square."""

    @staticmethod
    def rms_norm(x, weight, eps):
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True))).to(x.dtype)

    _kernel = rms_norm


@mutant("rotary-wrong-half", checks=CHECKS)
class RotaryWrongHalf(_OneKernel):
    """rotary_embedding negates the wrong half in rotate_half (cat(x2, -x1) instead of cat(-x2, x1))."""

    @staticmethod
    def rotary_embedding(positions, q, k, cos_sin_cache):
        half = cos_sin_cache.shape[1] // 2
        rows = cos_sin_cache.index_select(0, positions)
        cos = torch.cat((rows[:, :half], rows[:, :half]), dim=-1)[:, None]
        sin = torch.cat((rows[:, half:], rows[:, half:]), dim=-1)[:, None]
        for x in (q, k):
            rotated = torch.cat((x[..., half:], -x[..., :half]), dim=-1)
            x.copy_(x * cos.to(x.dtype) + rotated * sin.to(x.dtype))

    _kernel = rotary_embedding


@mutant("silu-and-mul-swapped", checks=CHECKS)
class SiluAndMulSwapped(_OneKernel):
    """silu_and_mul applies silu to the up half instead of the gate half."""

    @staticmethod
    def silu_and_mul(x):
        gate, up = x.chunk(2, dim=-1)
        return gate * torch.nn.functional.silu(up)

    _kernel = silu_and_mul


@mutant("fused-add-rms-norm-keeps-residual", checks=CHECKS)
class FusedAddRmsNormKeepsResidual(_OneKernel):
    """fused_add_rms_norm normalises x + residual but does not write the sum back to residual."""

    @staticmethod
    def fused_add_rms_norm(x, residual, weight, eps):
        x.copy_(reference.rms_norm(x + residual, weight, eps))

    _kernel = fused_add_rms_norm


@mutant("rotary-write-kv-skips-k", checks=CHECKS)
class RotaryWriteKvSkipsK(_OneKernel):
    """rotary_write_kv rotates the queries only: the keys stay unrotated, in place and in the cache."""

    @staticmethod
    def rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache):
        reference.rotary_embedding(positions, q, key[:, :0], cos_sin_cache)
        reference.write_kv(key, value, k_cache, v_cache, slot_mapping)

    _kernel = rotary_write_kv


@mutant("rotary-write-kv-caches-k-before-rotation", checks=CHECKS)
class RotaryWriteKvCachesKBeforeRotation(_OneKernel):
    """rotary_write_kv writes the keys into the cache before rotating them (q and k are right in place)."""

    @staticmethod
    def rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache):
        reference.write_kv(key, value, k_cache, v_cache, slot_mapping)
        reference.rotary_embedding(positions, q, key, cos_sin_cache)

    _kernel = rotary_write_kv


@mutant("rotary-write-kv-slot-plus-1", checks=CHECKS)
class RotaryWriteKvSlotPlusOne(_OneKernel):
    """rotary_write_kv writes each real token's K/V to slot + 1 (an off-by-one in the slot address)."""

    @staticmethod
    def rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache):
        reference.rotary_embedding(positions, q, key, cos_sin_cache)
        slots = torch.where(slot_mapping >= 0, (slot_mapping + 1) % (k_cache.shape[0] * k_cache.shape[1]), -1)
        reference.write_kv(key, value, k_cache, v_cache, slots)

    _kernel = rotary_write_kv


@mutant("qk-norm-rotary-write-kv-k-with-q-weight", checks=CHECKS)
class QkNormRotaryWriteKvKWithQWeight(_OneKernel):
    """qk_norm_rotary_write_kv normalises the key heads with the query heads' weight (``q_weight``)."""

    @staticmethod
    def qk_norm_rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache,
                                q_weight, k_weight, eps):
        return reference.qk_norm_rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping,
                                                 cos_sin_cache, q_weight, q_weight, eps)

    _kernel = qk_norm_rotary_write_kv


@mutant("qk-norm-rotary-write-kv-caches-unnormed-k", checks=CHECKS)
class QkNormRotaryWriteKvCachesUnnormedK(_OneKernel):
    """qk_norm_rotary_write_kv returns the right queries but caches the keys rotated, not normalised."""

    @staticmethod
    def qk_norm_rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache,
                                q_weight, k_weight, eps):
        T, H, D = q.shape
        q = reference.rms_norm(q.reshape(-1, D), q_weight, eps).view(T, H, D)
        reference.rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache)
        return q

    _kernel = qk_norm_rotary_write_kv


#: Key positions per partition of the split decode mutant below.
PARTITION = 256


@mutant("decode-attention-merge-drops-a-partition", checks=CHECKS)
class DecodeAttentionMergeDropsAPartition(_OneKernel):
    """paged_decode_attention split into partitions of 256 keys merges all but the first one (a
    sequence longer than one partition loses its first 256 keys)."""

    @staticmethod
    def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window=None):
        out = reference.paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window)
        for b, n in enumerate(seq_lens.tolist()):
            if n > PARTITION:   # keys PARTITION.. only: a window that starts there (clipped by the real one)
                window = n - PARTITION if sliding_window is None else min(sliding_window, n - PARTITION)
                out[b] = reference.paged_decode_attention(q[b:b + 1], k_cache, v_cache, block_tables[b:b + 1],
                                                          seq_lens[b:b + 1], scale, window)[0]
        return out

    _kernel = paged_decode_attention


@mutant("decode-attention-state-not-reset", checks=CHECKS)
class DecodeAttentionStateNotReset(_OneKernel):
    """paged_decode_attention keeps per-call state it does not reset (as a split kernel whose merge
    counters are never set back to zero): right on the first call of a batch shape, uninitialised
    output on every later one (a graph replay, the next layer)."""

    _seen: set = set()

    @staticmethod
    def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window=None):
        seen = DecodeAttentionStateNotReset._seen
        if q.shape in seen:
            return torch.full_like(q, 1e4)                # what was left in the output buffer
        seen.add(q.shape)
        return reference.paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window)

    _kernel = paged_decode_attention


# ---- quantized linear (contract 1.5): each breaks one format and runs the reference for the rest ----

def _blocks(weight, weight_format):
    """A GGUF weight as [N, blocks per row, block bytes] (a copy, free to change)."""
    from anydev.plugin_api.weight_formats import BLOCK_FORMATS

    return weight.clone().view(weight.shape[0], -1, BLOCK_FORMATS[weight_format].bytes)


@mutant("quantized-linear-int8-scale-of-next-row", checks=CHECKS)
class QuantizedLinearInt8ScaleOfNextRow(_OneKernel):
    """quantized_linear multiplies int8 row n by the scale of row n + 1 (a wrong scale)."""

    @staticmethod
    def quantized_linear(x, weight, scales, weight_format):
        if weight_format == "int8":
            scales = scales.roll(-1)
        return reference.quantized_linear(x, weight, scales, weight_format)

    _kernel = quantized_linear


@mutant("quantized-linear-q4-k-next-block", checks=CHECKS)
class QuantizedLinearQ4KNextBlock(_OneKernel):
    """quantized_linear reads q4_k super-block b + 1 of a row where it should read block b (a wrong
    block offset; the last block wraps to the first)."""

    @staticmethod
    def quantized_linear(x, weight, scales, weight_format):
        if weight_format == "q4_k":
            weight = _blocks(weight, weight_format).roll(-1, dims=1).reshape(weight.shape)
        return reference.quantized_linear(x, weight, scales, weight_format)

    _kernel = quantized_linear


@mutant("quantized-embedding-row-of-the-next-id", checks=CHECKS)
class QuantizedEmbeddingRowOfTheNextId(_OneKernel):
    """quantized_embedding looks up row ``ids[t] + 1`` (the last row wraps to the first): an off-by-one
    row offset."""

    @staticmethod
    def quantized_embedding(ids, weight, scales, weight_format, hidden, dtype):
        return reference.quantized_embedding((ids + 1) % weight.shape[0], weight, scales, weight_format, hidden, dtype)

    _kernel = quantized_embedding


@mutant("quantized-embedding-drops-the-last-32-values", checks=CHECKS)
class QuantizedEmbeddingDropsTheLast32Values(_OneKernel):
    """quantized_embedding leaves the last 32 values of every row 0 (a last program that stops short)."""

    @staticmethod
    def quantized_embedding(ids, weight, scales, weight_format, hidden, dtype):
        out = reference.quantized_embedding(ids, weight, scales, weight_format, hidden, dtype)
        out[:, -32:] = 0
        return out

    _kernel = quantized_embedding


@mutant("quantized-linear-q4-0-nibbles-swapped", checks=CHECKS)
class QuantizedLinearQ40NibblesSwapped(_OneKernel):
    """quantized_linear takes q4_0 values 0-15 from the high nibbles and 16-31 from the low ones."""

    @staticmethod
    def quantized_linear(x, weight, scales, weight_format):
        if weight_format == "q4_0":
            blocks = _blocks(weight, weight_format)
            qs = blocks[:, :, 2:]
            blocks[:, :, 2:] = (qs >> 4) | (qs << 4)
            weight = blocks.reshape(weight.shape)
        return reference.quantized_linear(x, weight, scales, weight_format)

    _kernel = quantized_linear


@mutant("linear-gemv-drops-last-k-tile", checks=CHECKS)
class LinearGemvDropsLastKTile(_OneKernel):
    """linear at one row ignores the last 256 inputs (a split-K slice lost)."""

    @staticmethod
    def linear(x, weight):
        if x.shape[0] == 1:
            return torch.nn.functional.linear(x[:, :-256], weight[:, :-256])
        return reference.linear(x, weight)

    _kernel = linear


# ---- kernel offers for some inputs (contract 1.6): wrong on what they declare ---------------------

class _OneOffer(_OneKernel):
    """A cpu runtime offering ``_kernel`` for the dtypes ``_dtypes`` and weight formats
    ``_weight_formats`` only (None: all), as a KernelOffer."""

    _dtypes = None
    _weight_formats = None

    def kernels(self):
        cls = type(self)
        return {cls._kernel.__name__: KernelOffer(cls._kernel, dtypes=cls._dtypes, weight_formats=cls._weight_formats)}


@mutant("quantized-linear-q4-k-offer-drops-mins", checks=CHECKS)
class QuantizedLinearQ4KOfferDropsMins(_OneOffer):
    """quantized_linear, offered for q4_k only, leaves out the blocks' minimums (reads dmin as 0)."""

    _weight_formats = ("q4_k",)

    @staticmethod
    def quantized_linear(x, weight, scales, weight_format):
        blocks = _blocks(weight, weight_format)
        blocks[:, :, 2:4] = 0
        return reference.quantized_linear(x, blocks.reshape(weight.shape), scales, weight_format)

    _kernel = quantized_linear


@mutant("rms-norm-bfloat16-offer-without-eps", checks=CHECKS)
class RmsNormBfloat16OfferWithoutEps(_OneOffer):
    """rms_norm, offered for bfloat16 activations only, leaves eps out of the root mean square."""

    _dtypes = ("bfloat16",)
    rms_norm = RmsNormWithoutEps.rms_norm
    _kernel = rms_norm


@mutant("rms-norm-wrong-beyond-4096-columns", checks=CHECKS, full_sweep=True)
class RmsNormWrongBeyond4096Columns(_OneKernel):
    """rms_norm takes the root mean square of the first 4096 columns only (one program's tile, as a
    kernel sized for Llama 8B's hidden size): right up to N = 4096, wrong at a 70B model's 8192."""

    @staticmethod
    def rms_norm(x, weight, eps):
        x32 = x.float()
        ms = x32[..., :4096].pow(2).mean(-1, keepdim=True)
        return weight * (x32 * torch.rsqrt(ms + eps)).to(x.dtype)

    _kernel = rms_norm


# ---- mixture of experts (contract 1.7) -----------------------------------------------------------

@mutant("moe-route-ties-to-the-higher-expert", checks=CHECKS)
class MoeRouteTiesToTheHigherExpert(_OneKernel):
    """moe_route breaks ties between equal probabilities towards the higher expert index (a wrong
    expert chosen whenever two experts tie)."""

    @staticmethod
    def moe_route(router_logits, top_k, renormalize):
        weights, ids = reference.moe_route(router_logits.flip(-1), top_k, renormalize)
        return weights, router_logits.shape[-1] - 1 - ids

    _kernel = moe_route


@mutant("moe-route-not-renormalized", checks=CHECKS)
class MoeRouteNotRenormalized(_OneKernel):
    """moe_route returns the top-k probabilities as they are even when asked to renormalise them."""

    @staticmethod
    def moe_route(router_logits, top_k, renormalize):
        return reference.moe_route(router_logits, top_k, False)

    _kernel = moe_route


@mutant("moe-linear-next-expert", checks=CHECKS)
class MoeLinearNextExpert(_OneKernel):
    """moe_linear multiplies each row by the weight of expert ``expert_ids[r] + 1`` (the last wraps
    to the first): a wrong expert's weights."""

    @staticmethod
    def moe_linear(x, weight, scales, weight_format, expert_ids):
        return reference.moe_linear(x, weight, scales, weight_format, (expert_ids + 1) % weight.shape[0])

    _kernel = moe_linear


@mutant("moe-combine-weights-of-the-next-copy", checks=CHECKS)
class MoeCombineWeightsOfTheNextCopy(_OneKernel):
    """moe_combine multiplies a token's copy j by the weight of copy j + 1 (the last by the first's)."""

    @staticmethod
    def moe_combine(expert_out, weights):
        return reference.moe_combine(expert_out, weights.roll(-1, dims=1))

    _kernel = moe_combine


@mutant("moe-combine-drops-the-last-copy", checks=CHECKS)
class MoeCombineDropsTheLastCopy(_OneKernel):
    """moe_combine sums a token's first top_k - 1 copies only (a loop that stops one short)."""

    @staticmethod
    def moe_combine(expert_out, weights):
        weights = weights.clone()
        weights[:, -1] = 0
        return reference.moe_combine(expert_out, weights)

    _kernel = moe_combine


# ---- log-probabilities (contract 1.10) ----------------------------------------------------------

@mutant("logprobs-ties-to-the-higher-id", checks=CHECKS)
class LogprobsTiesToTheHigherId(_OneKernel):
    """logprobs orders equal logits, and keeps those tied at the k-th place, higher id first."""

    @staticmethod
    def logprobs(logits, targets, k, out):
        V = logits.shape[1]
        reference.logprobs(logits.flip(-1), V - 1 - targets.clamp(min=0), k, out)
        out[:, 1 + k:] = V - 1 - out[:, 1 + k:]
        return out

    _kernel = logprobs


@mutant("logprobs-logsumexp-misses-the-last-chunk", checks=CHECKS)
class LogprobsLogsumexpMissesTheLastChunk(_OneKernel):
    """logprobs leaves the last 256 tokens out of the logsumexp (a merge that drops the last chunk's
    sum): every log-probability is off by the same constant."""

    @staticmethod
    def logprobs(logits, targets, k, out):
        reference.logprobs(logits, targets, k, out)
        row = logits.float()
        out[:, :1 + k] += (row.logsumexp(dim=1) - row[:, :-256].logsumexp(dim=1))[:, None]
        return out

    _kernel = logprobs


@mutant("logprobs-negative-target-wraps", checks=CHECKS)
class LogprobsNegativeTargetWraps(_OneKernel):
    """logprobs does not clamp a negative target: -1 reads the row's last token, not token 0."""

    @staticmethod
    def logprobs(logits, targets, k, out):
        return reference.logprobs(logits, targets % logits.shape[1], k, out)

    _kernel = logprobs


@mutant("logprobs-target-of-the-next-row", checks=CHECKS)
class LogprobsTargetOfTheNextRow(_OneKernel):
    """logprobs reads row r's target in row r + 1's logits (the last row's in the first's)."""

    @staticmethod
    def logprobs(logits, targets, k, out):
        reference.logprobs(logits, targets, k, out)
        chosen = logits.roll(-1, dims=0).float().log_softmax(dim=1).gather(1, targets.clamp(min=0)[:, None])
        out[:, 0] = chosen[:, 0]
        return out

    _kernel = logprobs



@mutant("quantized-linear-q8-0-split-scale-of-next-group", checks=CHECKS)
class QuantizedLinearQ80SplitScaleOfNextGroup(_OneOffer):
    """quantized_linear, offered for q8_0_split (a split-row format is taken only where named), scales
    each 32-value group by the ``d`` of the next one (a scale plane read one field late)."""

    _weight_formats = ("q8_0_split",)

    @staticmethod
    def quantized_linear(x, weight, scales, weight_format):
        K = x.shape[-1]
        shifted = weight.clone()
        d = shifted[:, K:].reshape(weight.shape[0], -1, 2)
        shifted[:, K:] = d.roll(-1, dims=1).reshape(weight.shape[0], -1)
        return reference.quantized_linear(x, shifted, scales, weight_format)

    _kernel = quantized_linear


@mutant("quantized-linear-q6-k-split-nibble-halves-swapped", checks=CHECKS)
class QuantizedLinearQ6KSplitNibbleHalvesSwapped(_OneOffer):
    """quantized_linear, offered for q6_k_split, takes a low-nibble byte's high nibble for value
    ``16g + i`` and its low one for ``16g + 8 + i`` (the plane's pairing read the other way round)."""

    _weight_formats = ("q6_k_split",)

    @staticmethod
    def quantized_linear(x, weight, scales, weight_format):
        half = x.shape[-1] // 2
        swapped = weight.clone()
        low = swapped[:, :half]
        swapped[:, :half] = (low << 4) | (low >> 4)
        return reference.quantized_linear(x, swapped, scales, weight_format)

    _kernel = quantized_linear
