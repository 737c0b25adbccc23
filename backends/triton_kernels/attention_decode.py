"""paged_decode_attention (see ``anydev.plugin_api.kernels.paged_decode_attention``): flash-decoding
over the pages in one launch, no gather, no mask tensor.

One program per (sequence, KV head, partition of the context): it computes all the query heads of
its KV head's group at once (one ``tl.dot`` per tile of keys: GQA reads each key once), reading keys
and values tile by tile through the block table, only up to the sequence's length, with an online
softmax in float32 (:func:`._attention.attend_tile`, shared with prefill).

The context is split into partitions only when the batch alone does not fill the device (split-K).
Then each program writes its partition's output and log-sum-exp to a scratch buffer and counts
itself done on a counter per (sequence, KV head); the last of them to finish merges every partition
into the output and sets the counter back to zero. (The counter is an atomic with acquire-release
order: its increment publishes the program's partition, and the last program's increment makes
every other partition visible to it.) So there is no second kernel, and the counters are zero again
whenever a launch ends, which is what a graph replay needs. A sequence of at most
``WHOLE_KEYS_PER_DIM`` keys per head element is read whole by its first partition's program, which
writes the output itself: the other partitions' programs of that sequence return without keys, and
none of them touches the counter (a batch mixes such short sequences with long, split ones). The
number of partitions depends only on shapes (never on ``seq_lens`` values), and nothing is allocated
or read back per value: a call can be captured in a device graph.
"""
from __future__ import annotations

import threading

import torch

from ._attention import attend_tile
from ._common import (LOG2E, pdl, pdl_wait, check_cache, check_last_dim_contiguous, dot_precision, programs_to_fill,
                      next_power_of_2, tl, triton, upcast_dots)

BLOCK_N = 64               # keys per tile (any block_size: each key row is found through the table)
MIN_SPLIT_TOKENS = BLOCK_N  # partitions: at most one per tile of the table
MAX_SPLITS = 16            # the last program to finish reads them all: more cost it more than they save
#: Warps of a split launch whose programs are no more than the multiprocessors (batch 1: each program
#: has one to itself, so its latency is the launch's): at 8 warps the sm_90 code keeps its tiles in
#: registers, where at 4 (BLOCK_N 64, 16 query rows) it spills to the stack in the key loop. A larger
#: launch keeps 4 warps, which lets a multiprocessor hold two programs (255 registers a thread).
ONE_WAVE_WARPS = 8
#: In a split launch, a sequence with at most this many keys per head element (384 at 128-wide heads)
#: is attended by one program, with no merge: at batch 1 on an H200, 256 keys of a 128-wide head take
#: one 8-warp program less time than four partitions and their merge, and 1,024 keys more.
WHOLE_KEYS_PER_DIM = 3


# The partition count and block-table width change from step to step: not specialized (Triton would
# compile another kernel when one turns 1 or a multiple of 16).
@triton.jit(do_not_specialize=["num_splits", "stride_tb"])
def _decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, tables_ptr, lens_ptr, out_ptr,
                   part_out_ptr, part_lse_ptr, counters_ptr,
                   qk_scale, window, num_splits,
                   stride_qb, stride_qh, stride_tb, stride_ob, stride_oh,
                   stride_page, stride_slot, stride_kvh,
                   GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                   GROUP_P2: tl.constexpr, SPLITS_PAD: tl.constexpr, WHOLE_KEYS: tl.constexpr,
                   USE_PDL: tl.constexpr = 0):
    pdl_wait(USE_PDL)
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    # The partitions share the keys this sequence has (not the table's width): a short context in a
    # long table still spreads over every partition.
    first = tl.where(window > 0, tl.maximum(seq_len - window, 0), 0)
    tokens_per_split = tl.cdiv(tl.cdiv(seq_len - first, num_splits), BLOCK_N) * BLOCK_N
    lo = first + split * tokens_per_split
    hi = tl.minimum(seq_len, lo + tokens_per_split)
    whole = seq_len - first <= WHOLE_KEYS * D
    if SPLIT:
        if whole:                           # the first partition reads every key; the others none
            lo = tl.where(split == 0, first, seq_len)
            hi = seq_len

    g = tl.arange(0, GROUP_PAD)
    heads = kv_head * GROUP + g
    in_group = g < GROUP
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=in_group[:, None], other=0.0)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        m_i, l_i, acc = attend_tile(q, m_i, l_i, acc, start, hi, seq_len - 1, window, qk_scale,
                                    k_cache_ptr, v_cache_ptr, tables_ptr + b * stride_tb, kv_head,
                                    stride_page, stride_slot, stride_kvh,
                                    D, BLOCK_SIZE, BLOCK_N, False, PRECISION, UPCAST)
    has_keys = l_i > 0.0
    out = tl.where(has_keys[:, None], acc / tl.where(has_keys, l_i, 1.0)[:, None], 0.0)
    out_rows = out_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :]
    if SPLIT:
        if whole:
            if split == 0:
                tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=in_group[:, None])
        else:
            # This partition's output and log-sum-exp: scratch [B, H, num_splits, D] and [B, H, num_splits].
            # Only the first `used` partitions hold keys (a short context in a wide table leaves the rest
            # empty): the others store nothing and the merge reads only those.
            part = (b * tl.num_programs(1) * GROUP + heads) * num_splits
            used = tl.where(seq_len > first, tl.cdiv(seq_len - first, tl.maximum(tokens_per_split, 1)), 0)
            if split < used:
                lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
                tl.store(part_out_ptr + (part + split)[:, None] * D + d[None, :], out, mask=in_group[:, None])
                tl.store(part_lse_ptr + part + split, lse, mask=in_group)
            # One thread does a scalar atomic: the barrier puts every warp's stores above before it, so
            # its release publishes the whole partition (and its acquire, broadcast, covers every warp).
            counter = counters_ptr + b * tl.num_programs(1) + kv_head
            tl.debug_barrier()
            finished_before = tl.atomic_add(counter, 1, sem="acq_rel")
            if finished_before == num_splits - 1:                          # the last one: merge, reset
                _merge_partitions(part_out_ptr, part_lse_ptr, out_ptr + b * stride_ob, stride_oh,
                                  (b * tl.num_programs(1) * GROUP + kv_head * GROUP) * num_splits, num_splits, used,
                                  kv_head * GROUP, GROUP, GROUP_P2, D, SPLITS_PAD)
                tl.atomic_xchg(counter, 0, sem="relaxed")
    else:
        tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=in_group[:, None])


@triton.jit
def _merge_partitions(part_out_ptr, part_lse_ptr, out_ptr, stride_oh, first_part, num_splits, used, first_head,
                      GROUP: tl.constexpr, GROUP_P2: tl.constexpr, D: tl.constexpr, SPLITS_PAD: tl.constexpr):
    """Write the ``GROUP`` heads from ``first_head`` of one sequence's output (at ``out_ptr``): their
    first ``used`` partitions (of ``num_splits`` per head, the group's first at ``first_part``) combined
    by their log-sum-exp (0 for a padding row, which has none). Every partition's loads are issued at
    once, not one partition after another: each is a trip to the L2 (``.cg``, not a stale L1: other
    programs wrote them), which a long context makes 16 of. The outputs are read in groups of four
    partitions to bound the registers a group takes."""
    g = tl.arange(0, GROUP_P2)
    d = tl.arange(0, D)
    part = first_part + g * num_splits                                   # [G]: each head's first partition
    s = tl.arange(0, SPLITS_PAD)
    held = (s[:, None] < used) & (g[None, :] < GROUP)                    # [S, G]
    lse = tl.load(part_lse_ptr + part[None, :] + s[:, None], mask=held, other=float("-inf"), cache_modifier=".cg")
    m = tl.max(lse, axis=0)
    m = tl.where(m == float("-inf"), 0.0, m)
    total = tl.sum(tl.exp2(lse - m[None, :]), axis=0)                    # [G]
    acc = tl.zeros([GROUP_P2, D], tl.float32)
    for base in tl.static_range(0, SPLITS_PAD, 4):
        four = base + tl.arange(0, 4)       # (their weights from lse again: a tensor cannot be sliced)
        in_use = (four[:, None] < used) & (g[None, :] < GROUP)            # [4, G]
        weight = tl.exp2(tl.load(part_lse_ptr + part[None, :] + four[:, None], mask=in_use, other=float("-inf"),
                                 cache_modifier=".cg") - m[None, :])
        out = tl.load(part_out_ptr + (part[None, :, None] + four[:, None, None]) * D + d[None, None, :],
                      mask=in_use[:, :, None], other=0.0, cache_modifier=".cg")
        acc += tl.sum(out * weight[:, :, None], axis=0)
    merged = acc / tl.where(total > 0.0, total, 1.0)[:, None]
    tl.store(out_ptr + (first_head + g)[:, None] * stride_oh + d[None, :], merged.to(out_ptr.dtype.element_ty),
             mask=(g < GROUP)[:, None])


def num_splits(batch: int, kv_heads: int, max_tokens: int, device: torch.device) -> int:
    """How many partitions share one sequence's context: enough programs to fill the device when
    batch x KV heads does not, at most one per MIN_SPLIT_TOKENS positions of the block table and
    MAX_SPLITS. (The kernel splits each sequence's own keys evenly among them.)"""
    wanted = triton.cdiv(programs_to_fill(device), max(batch * kv_heads, 1))
    return max(1, min(wanted, MAX_SPLITS, triton.cdiv(max_tokens, MIN_SPLIT_TOKENS)))


def decode_warps(programs: int, splits: int, device: torch.device) -> int:
    """:data:`ONE_WAVE_WARPS` for a split launch of no more ``programs`` than the device has
    multiprocessors (``programs_to_fill`` counts four programs each), else 4."""
    return ONE_WAVE_WARPS if splits > 1 and 4 * programs <= programs_to_fill(device) else 4


class _Counters:
    """The merge counters: int32 zeros, one buffer per (device, stream), grown on demand and never
    freed (a captured graph keeps using the buffer it was captured with). Every launch leaves the
    counters it used at zero, so a buffer is only zero-filled once, when it is made. Launches on
    one stream never overlap, and each stream has its own counters."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._outgrown: list[torch.Tensor] = []

    def get(self, device: torch.device, count: int) -> torch.Tensor:
        key = (device, _current_stream(device))
        with self._lock:
            buffer = self._buffers.get(key)
            if buffer is None or buffer.numel() < count:
                if buffer is not None:
                    self._outgrown.append(buffer)
                buffer = torch.zeros(next_power_of_2(max(count, 256)), dtype=torch.int32, device=device)
                self._buffers[key] = buffer
            return buffer


def _current_stream(device: torch.device):
    """The current torch stream of ``device`` (None on the cpu, where kernels run one at a time)."""
    module = getattr(torch, device.type, None)
    if device.type == "cpu" or not hasattr(module, "current_stream"):
        return None
    return module.current_stream(device)


_counters = _Counters()


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           sliding_window: int | None = None) -> torch.Tensor:
    check_cache(k_cache, v_cache)
    check_last_dim_contiguous("q", q)
    B, H, D = q.shape
    _, block_size, KV, _ = k_cache.shape
    out = torch.empty_like(q)
    if B == 0:
        return out
    group = H // KV
    max_tokens = block_tables.shape[1] * block_size
    splits = num_splits(B, KV, max_tokens, q.device)
    if splits > 1:
        part_out = torch.empty((B, H, splits, D), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((B, H, splits), dtype=torch.float32, device=q.device)
        counters = _counters.get(q.device, B * KV)
    else:
        part_out = part_lse = counters = out        # unused
    _decode_kernel[(B, KV, splits)](
        q, k_cache, v_cache, block_tables, seq_lens, out, part_out, part_lse, counters,
        float(scale) * LOG2E, int(sliding_window or 0), splits,
        q.stride(0), q.stride(1), block_tables.stride(0), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        GROUP=group, GROUP_PAD=max(16, next_power_of_2(group)), D=D, BLOCK_SIZE=block_size,
        BLOCK_N=BLOCK_N, SPLIT=splits > 1, PRECISION=dot_precision(q.dtype), UPCAST=upcast_dots(q.dtype, q.device),
        GROUP_P2=next_power_of_2(group), SPLITS_PAD=MAX_SPLITS,   # one compiled merge for every split count
        WHOLE_KEYS=WHOLE_KEYS_PER_DIM,
        num_warps=decode_warps(B * KV * splits, splits, q.device), num_stages=2, **pdl(q.device),
    )
    return out
