"""Device kernels (optional, contract 1.2): the operators of a Llama-family decoder that a backend may
implement natively, with their torch references, the registry :data:`KERNELS` and :class:`KernelSet`. Each function below is the torch **reference** of one kernel: its docstring is the
spec a vendor implements (shapes, dtypes, layouts, what is read and written) and its body defines the
meaning. A backend offers its own through :meth:`DeviceRuntime.kernels`; every kernel it does not offer
runs as the reference, so a backend without kernels (any contract 1.0/1.1 plugin) works unchanged.

Conventions shared by all kernels:

* Tensors live on the backend's torch device; activations are float32, float16 or bfloat16.
* **Paged KV cache**, per layer: ``k_cache`` and ``v_cache`` each ``[num_blocks, block_size,
  num_kv_heads, head_dim]``, contiguous; token slot ``s`` is page ``s // block_size``, row
  ``s % block_size``. (The engine's per-layer pool ``[2, slots, KV, D]`` gives them as
  ``pool[0].view(num_blocks, block_size, KV, D)`` and ``pool[1].view(...)``.)
* Index tensors are int32 (``block_tables``, ``seq_lens``, ``cu_seqlens_q``), except ``positions`` and
  ``slot_mapping``, which are int64.
* No kernel synchronises with the host or allocates memory whose size depends on tensor *values*, so
  that decode steps can be captured as device graphs (:meth:`DeviceRuntime.torch_graph`).
  (:func:`paged_prefill_attention` may: prefill is never captured. It runs once per layer between
  the piecewise graphs of a prefill or mixed step, though, where each host read stalls the device,
  so a fast one reads nothing back, e.g. sizing its grid from ``T`` and ``B`` as the Triton one does.)
* Native kernels are checked against these references by the conformance suite's ``kernels`` group
  (``conformance/test_kernels.py``), which states the tolerances per dtype.
* A **fused** kernel (:data:`FUSED`; ``rotary_write_kv``, added in contract 1.3, and
  ``qk_norm_rotary_write_kv``, 1.8) does the work of several kernels in one launch; its reference is
  exactly those kernels called in order. A backend
  that does not offer it gets their composition from its own :class:`KernelSet` (its native parts
  where it has them), so the engine always calls the fused name.
* **Linear layers** (contract 1.5): ``linear`` (a float weight, as ``F.linear``) and
  ``quantized_linear`` (a weight in one of :data:`~anydev.plugin_api.weight_formats.WEIGHT_FORMATS`,
  stored as :mod:`anydev.plugin_api.weight_formats` says). An implementation may pick its method
  by shape (e.g. a GEMV at decode's small ``T``); the result must match the reference at every shape.
  ``quantized_embedding`` (contract 1.9) looks up rows of a table stored the same way (a GGUF token
  embedding kept in its format), dequantized in one launch where the reference takes some 25 torch ops.
  A split-row format (contract 1.11 and 1.12, ``SPLIT_FORMATS``) reaches an offer only where it names it.
* **Offers for some inputs** (contract 1.6): a backend may offer a kernel for some activation dtypes
  and, for ``quantized_linear`` and ``moe_linear``, some weight formats only
  (:class:`~anydev.plugin_api.kernel_offers.KernelOffer`, e.g. Q4_K alone); the :class:`KernelSet`
  runs the reference on the rest, on the same device, and the suite checks only what is declared.
* **Mixture of experts** (contract 1.7): ``moe_route`` (a router's top-k experts and their weights)
  and ``moe_linear`` (a grouped linear layer: each row through the weight of its own expert, float or
  in any weight format). A MoE block is ``moe_route``, ``moe_linear`` (gate/up), ``silu_and_mul``,
  ``moe_linear`` (down) and ``moe_combine`` (contract 1.10: the weighted sum of each token's expert
  rows in one launch, where the reference takes a few torch ops).
* **Log-probabilities** (contract 1.10): ``logprobs`` is the sampling rank's, not the model's: each
  row's log-softmax at its chosen token and its top ``k``, packed as the engine reads them back, in
  one launch (the Triton set's) where the reference takes some 25 torch ops (two ``topk`` among them).
"""
from __future__ import annotations

import inspect
from typing import Callable, Mapping

import torch
import torch.nn.functional as F

from .errors import PluginError
from .kernel_offers import ACTIVATION_DTYPES, KernelOffer, KernelSpec, resolve_offer
from .weight_formats import SPLIT_FORMATS, WEIGHT_FORMATS, dequantize

# ---- attention over the paged KV cache -----------------------------------------------------------

def write_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Write the K/V of ``T`` new tokens into their pages, in place.

    ``key``/``value`` ``[T, KV, D]`` (any strides with a unit last stride), in the cache's dtype;
    ``slot_mapping`` ``[T]`` int64. Token ``t`` goes to slot ``slot_mapping[t]`` of ``k_cache`` and
    ``v_cache``; a negative slot is padding and nothing is written for it. Slots of real tokens are
    distinct. Nothing else of the caches changes.
    """
    if slot_mapping.numel() == 0:
        return
    flat_k, flat_v = _flat(k_cache), _flat(v_cache)
    keep = slot_mapping >= 0
    # Graph-safe skipping of padding (no host sync, no value-dependent shapes): padding rows rewrite
    # the largest real slot with the very value its own token writes (or, when every row is padding,
    # slot 0 with its current content), so every duplicate write stores identical bytes.
    # (Indexing with a tensor, not ``t[last]``: that is a host read of ``last``.)
    last = slot_mapping.argmax().view(1)
    target = torch.where(keep, slot_mapping, slot_mapping.index_select(0, last).clamp(min=0))
    for new, flat in ((key, flat_k), (value, flat_v)):
        filler = torch.where(keep.index_select(0, last)[:, None, None], new.index_select(0, last).to(flat.dtype),
                             flat.index_select(0, target.index_select(0, last)))
        flat.index_copy_(0, target, torch.where(keep[:, None, None], new.to(flat.dtype), filler))


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           sliding_window: int | None = None) -> torch.Tensor:
    """Attention of one new query per sequence over that sequence's pages; returns ``out [B, H, D]``
    in ``q``'s dtype.

    ``q`` ``[B, H, D]`` (after rotary); ``block_tables`` ``[B, M]`` int32, row ``b`` listing the
    pages of sequence ``b`` in order (entries past its length are unspecified and must not be read);
    ``seq_lens`` ``[B]`` int32, the number of keys of sequence ``b`` (the query's own K/V, written by
    :func:`write_kv`, included). Query ``b`` sits at position ``seq_lens[b] - 1`` and attends the keys
    at positions ``max(0, seq_lens[b] - sliding_window) .. seq_lens[b] - 1`` (all of them when
    ``sliding_window`` is None): ``softmax(scale * q . k) . v``, computed in float32. GQA: query head
    ``h`` uses KV head ``h // (H // KV)``. Pages past ``seq_lens[b]`` are never read. A row with
    ``seq_lens[b] == 0`` is padding: its output is zeros.
    """
    B, H, D = q.shape
    num_blocks, block_size, KV, _ = k_cache.shape
    pages = block_tables.long().clamp(0, num_blocks - 1)                 # unused entries: any page
    L = pages.shape[1] * block_size
    keys = k_cache[pages].reshape(B, L, KV, D).transpose(1, 2).float()   # [B, KV, L, D]
    values = v_cache[pages].reshape(B, L, KV, D).transpose(1, 2).float()
    visible = _visible(torch.arange(L, device=q.device), seq_lens.long()[:, None] - 1,
                       seq_lens.long()[:, None], sliding_window)[:, None, :, None]   # [B, 1, L, 1]
    # Zero what is not visible, so that whatever the unread slots hold (even NaN) cannot leak in.
    keys, values = keys.where(visible, 0.0), values.where(visible, 0.0)
    out = F.scaled_dot_product_attention(
        q.float()[:, :, None], keys, values, attn_mask=visible[..., 0][:, :, None], scale=scale,
        enable_gqa=H != KV)[:, :, 0]                                     # [B, H, D]
    return torch.where((seq_lens > 0)[:, None, None], out, 0.0).to(q.dtype)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                            block_tables: torch.Tensor, scale: float,
                            sliding_window: int | None = None) -> torch.Tensor:
    """Causal attention of the new tokens of ``B`` sequences packed without padding; returns
    ``out [T, H, D]`` in ``q``'s dtype.

    ``q`` ``[T, H, D]`` (after rotary); ``cu_seqlens_q`` ``[B+1]`` int32, cumulative query counts
    (``cu_seqlens_q[0] == 0``, ``cu_seqlens_q[B] == T``): sequence ``b``'s queries are
    ``q[cu[b]:cu[b+1]]`` (``q_len_b`` of them, possibly 0); ``seq_lens`` ``[B]`` int32, the number of
    keys of sequence ``b`` (``>= q_len_b``); ``block_tables`` ``[B, M]`` int32 as in
    :func:`paged_decode_attention`. The queries sit at positions ``seq_lens[b] - q_len_b ..
    seq_lens[b] - 1``; the query at position ``p`` attends the keys at positions ``max(0, p + 1 -
    sliding_window) .. p`` read through the pages: the new tokens' K/V were written by
    :func:`write_kv` before the call, earlier positions may be a cached prefix (chunked prefill, prefix
    caching). Math in float32; GQA as in decode. No mask tensor is needed by an implementation.
    """
    T, H, D = q.shape
    KV = k_cache.shape[2]
    out = q.new_zeros(T, H, D)
    starts, lens = cu_seqlens_q.tolist(), seq_lens.tolist()   # host values: prefill is never captured
    for b, length in enumerate(lens):
        first, end = starts[b], starts[b + 1]
        if end == first:
            continue
        slots = _slots(block_tables[b], length, k_cache.shape[1])
        keys = _flat(k_cache)[slots].transpose(0, 1).float()                # [KV, L, D]
        values = _flat(v_cache)[slots].transpose(0, 1).float()
        positions = torch.arange(length - (end - first), length, device=q.device)[:, None]
        visible = _visible(torch.arange(length, device=q.device), positions, positions + 1, sliding_window)
        out[first:end] = F.scaled_dot_product_attention(
            q[first:end].float().transpose(0, 1), keys, values, attn_mask=visible, scale=scale,
            enable_gqa=H != KV).transpose(0, 1).to(q.dtype)
    return out


# ---- normalisation, rotary, activation -----------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension: ``x`` ``[T, N]``, ``weight`` ``[N]``; returns ``[T, N]`` in
    ``x``'s dtype. HF's numerics: ``x * rsqrt(mean(x^2) + eps)`` in float32, cast to ``x``'s dtype,
    then multiplied by ``weight``."""
    x32 = x.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """The residual add and the next RMSNorm, in place: ``residual <- x + residual`` (rounded to the
    dtype, as HF's ``hidden_states = residual + hidden_states``), then ``x <- rms_norm(residual,
    weight, eps)``. ``x`` and ``residual`` ``[T, N]`` contiguous, same dtype; ``weight`` ``[N]``."""
    residual.add_(x)
    x.copy_(rms_norm(residual, weight, eps))


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                     cos_sin_cache: torch.Tensor) -> None:
    """Rotary position embedding of queries and keys, in place, HF/neox ``rotate_half`` style.

    ``positions`` ``[T]`` int64; ``q`` ``[T, H, D]`` and ``k`` ``[T, KV, D]`` (views are allowed, e.g.
    into a fused qkv projection; the last stride is 1); ``cos_sin_cache`` ``[max_pos, D]`` float32
    from :func:`cos_sin_cache`, row ``p`` = ``cat(cos(p * inv_freq), sin(p * inv_freq))``. With
    ``cos``/``sin`` the row's halves repeated to ``D``: ``x <- x * cos + rotate_half(x) * sin`` where
    ``rotate_half(x) = cat(-x[D/2:], x[:D/2])``. HF's numerics: ``cos``/``sin`` are cast to ``x``'s
    dtype and the math runs in that dtype (an implementation may compute in float32 and round once).
    """
    half = cos_sin_cache.shape[1] // 2
    rows = cos_sin_cache.index_select(0, positions)                     # [T, D]
    cos = torch.cat((rows[:, :half], rows[:, :half]), dim=-1)[:, None]  # [T, 1, D]
    sin = torch.cat((rows[:, half:], rows[:, half:]), dim=-1)[:, None]
    for x in (q, k):
        c, s = cos.to(x.dtype), sin.to(x.dtype)
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        x.copy_(x * c + rotated * s)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation: ``x`` ``[T, 2I]`` (gate, then up, as one fused projection's output);
    returns ``silu(x[:, :I]) * x[:, I:]`` ``[T, I]`` in ``x``'s dtype (HF: silu in the dtype, then
    the multiply)."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def rotary_write_kv(positions: torch.Tensor, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                    cos_sin_cache: torch.Tensor) -> None:
    """:func:`rotary_embedding` then :func:`write_kv` in one kernel (fused, contract 1.3): the new
    tokens' queries and keys rotated in place, then their keys (rotated) and values written into the
    pages.

    ``positions`` ``[T]`` int64, ``q`` ``[T, H, D]``, ``key`` and ``value`` ``[T, KV, D]`` (views
    are allowed, e.g. into a fused qkv projection; the last stride is 1), in the cache's dtype;
    ``k_cache``/``v_cache`` the layer's pages; ``slot_mapping`` ``[T]`` int64 (negative: padding,
    nothing written for that token; but its ``q`` and ``key`` rows are still rotated);
    ``cos_sin_cache`` as in :func:`rotary_embedding`. Writes ``q`` and ``key`` (rotated, as
    :func:`rotary_embedding` does) and the slots of the real tokens in both caches (exactly the
    rotated ``key`` and ``value`` rows, as :func:`write_kv` does); reads nothing else of the caches
    and writes nothing else anywhere (``value`` is only read).
    """
    rotary_embedding(positions, q, key, cos_sin_cache)
    write_kv(key, value, k_cache, v_cache, slot_mapping)


def qk_norm_rotary_write_kv(positions: torch.Tensor, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                            cos_sin_cache: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                            eps: float) -> torch.Tensor:
    """:func:`rms_norm` over each query head and each key head, then :func:`rotary_write_kv`, in one
    kernel (fused, contract 1.8): the attention input of a family with per-head q/k norms (Qwen3).
    Returns the queries, normalised and rotated, ``[T, H, D]`` in ``q``'s dtype.

    Arguments as :func:`rotary_write_kv`'s, and ``q_weight``/``k_weight`` ``[D]`` (each shared by
    all heads) in ``q``'s dtype, ``eps``. Each head ``q[t, h]`` is normalised as :func:`rms_norm`
    normalises a row (HF's numerics: float32 statistics, rounded to the dtype, then the weight
    multiply, rounded), so is each ``key[t, h]`` with ``k_weight``; then both are rotated and the real
    tokens' slots of both caches get the normalised, rotated keys and the values (padding slots:
    nothing). The returned tensor may be ``q`` itself (an implementation may work in place); ``q`` and
    ``key`` may be overwritten, and their content after the call is unspecified. Nothing else is
    written (``value`` is only read).
    """
    T, H, D = q.shape
    q = rms_norm(q.reshape(-1, D), q_weight, eps).view(T, H, D)
    key = rms_norm(key.reshape(-1, D), k_weight, eps).view(key.shape)
    rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache)
    return q


# ---- linear layers (contract 1.5) ---------------------------------------------------------------

def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T``: ``x`` ``[T, K]`` (rows may be strided, unit last stride), ``weight`` ``[N, K]``
    contiguous, of ``x``'s dtype; returns ``[T, N]`` contiguous in ``x``'s dtype, accumulated in
    float32. (A bias, where a model has one, is added by the caller.)"""
    return F.linear(x, weight)


def quantized_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None,
                     weight_format: str) -> torch.Tensor:
    """``x @ W.T`` where ``W`` ``[N, K]`` is the matrix that ``weight`` (with ``scales``) stores in
    ``weight_format`` (see :mod:`anydev.plugin_api.weight_formats`, whose ``dequantize`` defines it;
    ``K`` is ``x.shape[1]``). ``x`` ``[T, K]`` float32, float16 or bfloat16 (rows may be strided,
    unit last stride); returns ``[T, N]`` contiguous in ``x``'s dtype. The products are computed from
    the stored values without materialising ``W`` in memory where the implementation can (that is
    the point), accumulated in float32."""
    w = dequantize(weight, scales, weight_format, x.shape[-1])
    return (x.float() @ w.T).to(x.dtype)


def quantized_embedding(ids: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str,
                        hidden: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows ``ids`` of a quantized table (contract 1.9: a token embedding kept in its format), as
    ``[T, hidden]`` contiguous in ``dtype`` (float32, float16 or bfloat16). ``ids`` ``[T]`` int64, each
    in ``0 .. N - 1``; ``weight`` (with ``scales``) stores the ``[N, hidden]`` matrix in ``weight_format``
    as for :func:`quantized_linear`. Only the rows named are read; nothing is read back to the host
    (the lookup runs inside a captured decode graph). Row ``t`` is ``W[ids[t]]`` as ``dequantize``
    gives it, rounded once to ``dtype``."""
    rows = weight.index_select(0, ids)
    row_scales = None if scales is None else scales.index_select(0, ids)
    return dequantize(rows, row_scales, weight_format, hidden).to(dtype)


# ---- mixture of experts (contract 1.7) -----------------------------------------------------------

def moe_route(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A router's choice for ``T`` tokens over ``E`` experts: ``(weights [T, top_k] float32,
    expert_ids [T, top_k] int64)``.

    ``router_logits`` ``[T, E]`` (any float dtype, contiguous); ``1 <= top_k <= E``. The probabilities
    are ``softmax(router_logits)`` in float32 over the experts; row ``t`` picks the ``top_k`` largest,
    largest first, and among equal probabilities the lower expert index first (so a tie is decided
    the same way on every backend); its weights are those probabilities, divided by their sum when
    ``renormalize`` (HF's ``norm_topk_prob``). Graph-safe: no host reads, shapes from ``T``, ``E``,
    ``top_k`` only.
    """
    probs = torch.softmax(router_logits.float(), dim=-1)
    # A stable descending sort keeps equal probabilities in expert order (torch.topk does not promise it).
    ordered, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    weights, expert_ids = ordered[:, :top_k], order[:, :top_k]
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.contiguous(), expert_ids.contiguous()


def moe_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str | None,
               expert_ids: torch.Tensor) -> torch.Tensor:
    """A grouped linear layer: row ``r`` of ``x`` times the weight of expert ``expert_ids[r]``;
    returns ``out [R, N]`` contiguous in ``x``'s dtype, ``out[r] = x[r] @ W[expert_ids[r]].T``
    accumulated in float32.

    ``x`` ``[R, K]`` float32, float16 or bfloat16 (rows may be strided, unit last stride);
    ``expert_ids`` ``[R]`` int64 in ``[0, E)`` (any number of rows may share an expert; an expert may
    get none). The ``E`` experts' weights are stacked, each as :func:`linear` or
    :func:`quantized_linear` takes one: ``weight_format`` None: ``weight`` ``[E, N, K]`` of ``x``'s
    dtype; else a name of :data:`~anydev.plugin_api.weight_formats.WEIGHT_FORMATS`: ``weight``
    ``[E, N, ...]`` with ``weight[e]`` stored as that format stores an ``[N, K]`` matrix, and
    ``scales`` ``[E, N]`` float32 for the per-channel formats (None for GGUF blocks). Only the
    experts some row names are read (the weights of the others may hold anything, NaN included).
    Graph-safe: no host reads, shapes from ``R``, ``N``, ``K`` only.
    """
    out = torch.zeros(x.shape[0], weight.shape[1], dtype=torch.float32, device=x.device)
    for e in range(weight.shape[0]):     # every expert, each row keeping its own's product
        w = weight[e] if weight_format is None else dequantize(
            weight[e], None if scales is None else scales[e], weight_format, x.shape[-1])
        out = torch.where((expert_ids == e)[:, None], x.float() @ w.float().T, out)
    return out.to(x.dtype)


def moe_combine(expert_out: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The last step of a MoE block (contract 1.10): each token's expert rows, weighted and summed;
    returns ``[T, N]`` contiguous in ``expert_out``'s dtype.

    ``expert_out`` ``[T * top_k, N]`` float32, float16 or bfloat16 (rows may be strided, unit last
    stride), token ``t``'s rows ``t * top_k .. t * top_k + top_k - 1`` (:func:`moe_linear` over
    :func:`moe_route`'s experts); ``weights`` ``[T, top_k]`` float32, contiguous (``moe_route``'s).
    Row ``t`` is ``sum_j weights[t, j] * expert_out[t * top_k + j]``, the products and the sum in
    float32, rounded once to the dtype. Graph-safe: no host reads, shapes from ``T``, ``top_k``, ``N``."""
    T, top_k = weights.shape
    rows = expert_out.float().reshape(T, top_k, expert_out.shape[-1])
    return (rows * weights[:, :, None]).sum(dim=1).to(expert_out.dtype)


def cos_sin_cache(inv_freq: torch.Tensor, max_positions: int) -> torch.Tensor:
    """The ``[max_positions, D]`` float32 table :func:`rotary_embedding` reads: row ``p`` is
    ``cat(cos(p * inv_freq), sin(p * inv_freq))``. ``inv_freq`` ``[D/2]`` float32 from
    ``anydev.core.models.rope.inverse_frequencies`` (default, linear and llama3 scaling), on the
    device the cache should live on."""
    positions = torch.arange(max_positions, dtype=torch.float32, device=inv_freq.device)
    freqs = positions[:, None] * inv_freq.float()[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


# ---- log-probabilities (contract 1.10) ----------------------------------------------------------

#: The most top log-probabilities :func:`logprobs` gives a row (the OpenAI API's limit).
LOGPROBS_MAX_K = 20


def logprobs(logits: torch.Tensor, targets: torch.Tensor, k: int, out: torch.Tensor) -> torch.Tensor:
    """Each row's log-probabilities, packed as the sampling rank reads them back (contract 1.10):
    written into ``out``, which is returned.

    ``logits`` ``[R, V]`` float32, float16 or bfloat16 (rows may be strided, unit last stride);
    ``targets`` ``[R]`` int64, each below ``V``; ``0 <= k <= min(LOGPROBS_MAX_K, V)``; ``out`` ``[R,
    1 + 2k]`` float32, contiguous. With ``logp = logits[r] - logsumexp(logits[r])`` in float32 (the
    log-softmax): ``out[r, 0] = logp[max(targets[r], 0)]`` (a negative target, a failed row's code,
    reads token 0); ``out[r, 1:1 + k]`` the ``k`` largest of ``logp``, largest first; ``out[r, 1 +
    k:]`` their token ids as float32 (exact below 2**24). Tokens are ordered by logit, largest first,
    and among equal logits (``-0.0 == 0.0``) the lower id first, at the ``k``-th place too: of the
    tokens tied there the lowest ids are the ones kept, so every backend gives the same ids. A
    ``-inf`` logit is an ordinary value (log-probability ``-inf``); a row holding NaN may give
    anything but must not fault. Graph-safe: no host reads, shapes from ``R``, ``V``, ``k`` only."""
    logp = logits.log_softmax(dim=-1, dtype=torch.float32)
    out[:, 0] = logp.gather(1, targets.clamp(min=0)[:, None])[:, 0]
    if k == 0:
        return out
    R, V = logits.shape
    # No sort of the vocabulary: topk gives the k-th largest logit and the ids of the larger ones
    # (before it in its list); of the tokens equal to it, the lowest ids fill the places left, found
    # by a second topk over ``V - id`` where a token ties (0 elsewhere).
    top = logits.topk(k, dim=-1)
    kth = top.values[:, -1:]
    larger = (top.values > kth).sum(dim=1, keepdim=True)
    tied = (logits == kth) * torch.arange(V, 0, -1, dtype=torch.int32, device=logits.device)
    lowest_tied = V - tied.topk(k, dim=-1).values.long()
    place = torch.arange(k, device=logits.device)
    ids = torch.where(place < larger, top.indices, lowest_tied.gather(1, (place - larger).clamp(min=0)))
    ids = ids.clamp(max=V - 1).sort(dim=1).values       # a NaN row may tie fewer tokens than it needs
    # Largest first, a stable sort keeping equal logits in ascending ids (+ 0.0: a radix sort, as on a
    # GPU, would put -0.0 after 0.0).
    ids = ids.gather(1, (logits.gather(1, ids) + 0.0).sort(dim=1, descending=True, stable=True).indices)
    out[:, 1:1 + k] = logp.gather(1, ids)
    out[:, 1 + k:] = ids
    return out


# ---- the registry: one entry per kernel ----------------------------------------------------------

#: Every kernel of the contract, by name: its reference, the version that added it, and the inputs an
#: offer of it may narrow (:class:`~anydev.plugin_api.kernel_offers.KernelSpec`). A new kernel is one
#: entry here (and its reference above).
KERNELS: Mapping[str, KernelSpec] = {spec.name: spec for spec in (
    KernelSpec("write_kv", write_kv, (1, 2), dtype_arg="key"),
    KernelSpec("paged_decode_attention", paged_decode_attention, (1, 2), dtype_arg="q"),
    KernelSpec("paged_prefill_attention", paged_prefill_attention, (1, 2), dtype_arg="q"),
    KernelSpec("rms_norm", rms_norm, (1, 2), dtype_arg="x"),
    KernelSpec("fused_add_rms_norm", fused_add_rms_norm, (1, 2), dtype_arg="x"),
    KernelSpec("rotary_embedding", rotary_embedding, (1, 2), dtype_arg="q"),
    KernelSpec("silu_and_mul", silu_and_mul, (1, 2), dtype_arg="x"),
    KernelSpec("rotary_write_kv", rotary_write_kv, (1, 3), dtype_arg="q", fused=("rotary_embedding", "write_kv")),
    KernelSpec("qk_norm_rotary_write_kv", qk_norm_rotary_write_kv, (1, 8), dtype_arg="q",
               fused=("rms_norm", "rotary_write_kv")),
    KernelSpec("linear", linear, (1, 5), dtype_arg="x"),
    KernelSpec("quantized_linear", quantized_linear, (1, 5), dtype_arg="x", format_arg="weight_format",
               weight_formats=WEIGHT_FORMATS, named_formats=tuple(SPLIT_FORMATS)),
    KernelSpec("quantized_embedding", quantized_embedding, (1, 9), dtype_arg="dtype", format_arg="weight_format",
               weight_formats=WEIGHT_FORMATS, named_formats=tuple(SPLIT_FORMATS)),
    KernelSpec("moe_route", moe_route, (1, 7), dtype_arg="router_logits"),
    KernelSpec("moe_linear", moe_linear, (1, 7), dtype_arg="x", format_arg="weight_format",
               weight_formats=WEIGHT_FORMATS, named_formats=tuple(SPLIT_FORMATS)),
    KernelSpec("moe_combine", moe_combine, (1, 10), dtype_arg="expert_out"),
    KernelSpec("logprobs", logprobs, (1, 10), dtype_arg="logits"),
)}
#: Every kernel's name, in the registry's order: those of 1.2, the fused ones (1.3, 1.8), the linear
#: layers (1.5), the quantized embedding's lookup (1.9), the mixture-of-experts kernels (1.7, 1.10), the
#: sampler's log-probabilities (1.10).
KERNEL_NAMES = tuple(KERNELS)
REFERENCES: Mapping[str, Callable] = {name: spec.reference for name, spec in KERNELS.items()}
#: Fused kernels and the kernels each one stands for, in the order its reference calls them.
FUSED: Mapping[str, tuple[str, ...]] = {name: spec.fused for name, spec in KERNELS.items() if spec.fused}


# ---- what the engine holds -----------------------------------------------------------------------

class KernelSet:
    """The kernels a backend runs: one attribute per name of :data:`KERNEL_NAMES`.

    Each is the backend's own where it offers the kernel, the reference otherwise; a fused kernel it
    does not offer is the composition of this set's own parts (:data:`FUSED`). A kernel offered for
    some inputs only (a :class:`~anydev.plugin_api.kernel_offers.KernelOffer`) runs the backend's own
    on the dtypes and weight formats it declares and, on the same tensors (so the same device), the
    reference (or composition) on the rest. ``native`` names the kernels the backend offers,
    ``offers`` holds their resolved declarations, :meth:`supports` answers for one input, and
    :meth:`describe` says which is which, in one line, for start-up logs."""

    def __init__(self, backend: str, native: Mapping[str, Callable | KernelOffer] | None = None, note: str = ""):
        native = dict(native or {})
        unknown = sorted(set(native) - set(KERNEL_NAMES))
        if unknown:
            raise PluginError(
                f"backend '{backend}' offers unknown kernel(s) {', '.join(unknown)}; the contract's "
                f"kernels are: {', '.join(KERNEL_NAMES)} (anydev.plugin_api.kernels). Rename them, "
                f"or upgrade anydev if they belong to a newer contract."
            )
        self.backend = backend
        self.note = note
        self.offers: Mapping[str, KernelOffer] = {name: resolve_offer(backend, KERNELS[name], native[name])
                                                 for name in KERNEL_NAMES if name in native}
        self.native = frozenset(self.offers)
        for name, spec in KERNELS.items():
            if not spec.fused:
                setattr(self, name, self._choose(spec, spec.reference))
        for name, spec in KERNELS.items():
            if spec.fused:
                setattr(self, name, self._choose(spec, _COMPOSE[name](*(getattr(self, part) for part in spec.fused))))

    def _choose(self, spec: KernelSpec, fallback: Callable) -> Callable:
        offer = self.offers.get(spec.name)
        if offer is None:
            return fallback
        if offer.covers(spec):
            return offer.kernel
        return _by_input(spec, offer, fallback)

    @classmethod
    def reference(cls, backend: str = "reference") -> "KernelSet":
        """Every kernel from the torch references (what a backend without kernels gets)."""
        return cls(backend)

    def supports(self, name: str, dtype=None, weight_format: str | None = None) -> bool:
        """True when kernel ``name`` runs the backend's own for activations of ``dtype`` (a
        ``torch.dtype`` or its name; None: any it declares) and ``weight_format`` (None: any)."""
        offer = self.offers.get(name)
        if offer is None:
            return False
        return (dtype is None or _dtype_name(dtype) in offer.dtypes) and \
            (weight_format is None or weight_format in offer.weight_formats)

    def describe(self) -> str:
        """E.g. ``nvidia kernels: native (Triton) write_kv, ...; reference rms_norm`` (a fused kernel
        not offered: ``rotary_write_kv as rotary_embedding + write_kv``; one offered for some inputs
        only: ``quantized_linear [q4_k; float16]``)."""
        native = [self._offered(n) for n in KERNEL_NAMES if n in self.native]
        reference = [n for n in KERNEL_NAMES if n not in self.native and n not in FUSED]
        composed = [f"{n} as {' + '.join(FUSED[n])}" for n in FUSED if n not in self.native]
        parts = []
        if native:
            parts.append(f"native{f' ({self.note})' if self.note else ''} {', '.join(native)}")
        if reference:
            parts.append(f"reference {', '.join(reference)}")
        return f"{self.backend} kernels: {'; '.join(parts + composed)}"

    def _offered(self, name: str) -> str:
        spec, offer = KERNELS[name], self.offers[name]
        if offer.covers(spec):
            return name
        narrowed = [axis for axis, full in ((offer.weight_formats, spec.weight_formats),
                                            (offer.dtypes, ACTIVATION_DTYPES)) if tuple(axis) != tuple(full)]
        return f"{name} [{'; '.join(', '.join(axis) for axis in narrowed)}]"

    def __repr__(self) -> str:
        return f"<KernelSet {self.describe()}>"


def _by_input(spec: KernelSpec, offer: KernelOffer, fallback: Callable) -> Callable:
    """One callable for a kernel offered for some inputs: the backend's own where its offer takes the
    call's dtype and weight format, ``fallback`` elsewhere. Reads only tensor metadata (graph-safe)."""
    parameters = list(inspect.signature(spec.reference).parameters)
    dtype_at = parameters.index(spec.dtype_arg)
    format_at = parameters.index(spec.format_arg) if spec.format_arg else None
    dtypes = frozenset(getattr(torch, name) for name in offer.dtypes)
    formats = frozenset(offer.weight_formats)
    native = offer.kernel

    def kernel(*args, **kwargs):
        x = args[dtype_at] if len(args) > dtype_at else kwargs[spec.dtype_arg]
        takes = (x if isinstance(x, torch.dtype) else x.dtype) in dtypes
        if takes and format_at is not None:
            # None is a float weight (moe_linear), which every offer takes for the dtypes it declares.
            weight_format = args[format_at] if len(args) > format_at else kwargs[spec.format_arg]
            takes = weight_format is None or weight_format in formats
        return (native if takes else fallback)(*args, **kwargs)

    kernel.__name__ = kernel.__qualname__ = spec.name
    return kernel


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---- helpers -------------------------------------------------------------------------------------

def _rotary_then_write_kv(rotary_embedding: Callable, write_kv: Callable) -> Callable:
    """``rotary_write_kv`` as the two kernels it fuses (for a backend that does not offer it)."""

    def rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache):
        rotary_embedding(positions, q, key, cos_sin_cache)
        write_kv(key, value, k_cache, v_cache, slot_mapping)

    return rotary_write_kv


def _qk_norm_then_rotary_write_kv(rms_norm: Callable, rotary_write_kv: Callable) -> Callable:
    """``qk_norm_rotary_write_kv`` as the kernels it fuses: ``rms_norm`` of the query heads and of the key
    heads, then ``rotary_write_kv`` of the normalised heads (for a backend that does not offer it)."""

    def qk_norm_rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache,
                                q_weight, k_weight, eps):
        T, H, D = q.shape
        q = rms_norm(q.reshape(-1, D), q_weight, eps).view(T, H, D)
        key = rms_norm(key.reshape(-1, D), k_weight, eps).view(key.shape)
        rotary_write_kv(positions, q, key, value, k_cache, v_cache, slot_mapping, cos_sin_cache)
        return q

    return qk_norm_rotary_write_kv


#: How each fused kernel is composed of the kernel set's own parts (a fused kernel may be a part of a
#: later one: the registry lists it first).
_COMPOSE: Mapping[str, Callable] = {"rotary_write_kv": _rotary_then_write_kv,
                                    "qk_norm_rotary_write_kv": _qk_norm_then_rotary_write_kv}


def _flat(cache: torch.Tensor) -> torch.Tensor:
    """``[num_blocks, block_size, KV, D]`` -> ``[slots, KV, D]`` (a view)."""
    return cache.view(-1, *cache.shape[2:])


def _slots(block_table: torch.Tensor, length: int, block_size: int) -> torch.Tensor:
    """The cache slots of positions ``0 .. length-1`` of one sequence."""
    positions = torch.arange(length, device=block_table.device)
    return block_table.long()[positions // block_size] * block_size + positions % block_size


def _visible(key_pos: torch.Tensor, query_pos: torch.Tensor, key_end: torch.Tensor,
             sliding_window: int | None) -> torch.Tensor:
    """Boolean ``[..., L]``: keys ``key_pos`` a query at ``query_pos`` sees (keys before ``key_end``,
    inside the sliding window)."""
    visible = key_pos < key_end
    if sliding_window is not None:
        visible &= key_pos > query_pos - sliding_window
    return visible
