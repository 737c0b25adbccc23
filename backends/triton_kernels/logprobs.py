"""logprobs (contract 1.10, see ``anydev.plugin_api.kernels``): a row's log-softmax at its target and
its top ``k``, in one launch.

Each token is one int64 key, its logit's float32 bits mapped to a signed integer of the same order
(``-0.0`` as ``0.0``) above ``2**31 - 1 - id``: the keys are distinct, and the largest key is the
largest logit, of the lowest id among equal ones, so one ``max`` a pick decides the order and the
ties exactly. One program per row and chunk of :func:`block` tokens stores the chunk's max and sum of
exponentials and its ``k`` largest keys (``k`` rounds of max-and-remove in registers); the row's last
chunk to arrive (an arrival counter per row, as :mod:`._split_k`'s, left at zero) merges the sums
into the logsumexp and the keys into the row's ``k`` (the same rounds), reads the target's logit and
writes the packed row. One launch, not a merge launch of its own: the host's cost of a Triton launch
(~25 us on an H200's host) is what a decode step that asks for logprobs waits on.
"""
from __future__ import annotations

import functools

import torch

from anydev.plugin_api.errors import InvalidArgumentError
from anydev.plugin_api.kernels import LOGPROBS_MAX_K

from ._common import next_power_of_2, pdl, pdl_wait, programs_to_fill, tl, triton
from ._split_k import arrival_counters

#: Below every token's key (theirs are above it: an id's part is below 2**31): places past the tokens.
NO_KEY = tl.constexpr(-(2 ** 63))
#: The top-list width the kernels hold in registers: every k up to LOGPROBS_MAX_K.
TOP = next_power_of_2(LOGPROBS_MAX_K)


def block(R: int, V: int, device: torch.device) -> int:
    """Tokens a program reads. On a GPU 4096 (a 128256- or 151936-token row is 32 or 38
    programs), or 2048 while the rows' programs would not fill its multiprocessors (decode's few rows):
    the fastest on an H200 at R 1..256 (bfloat16 and float32 rows, k 5 and 20), against 1024 and 8192,
    whose merges have more keys or whose programs fewer. 1024 under Triton's interpreter, so that CI's
    rows of a few thousand tokens span several chunks."""
    if device.type == "cpu":
        size = 1024
    else:
        size = 2048 if R * triton.cdiv(V, 4096) < programs_to_fill(device) // 4 else 4096
    return min(size, next_power_of_2(V))


#: Warps a program: on the H200, 4 beat 8 from 8 rows up (cheaper rounds) and tie below.
WARPS = 4


@triton.jit
def _keys(x, ids):
    x = tl.where(x == 0.0, 0.0, x)                 # -0.0 ties 0.0
    bits = x.to(tl.int32, bitcast=True)
    bits = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return (bits.to(tl.int64) << 32) | (0x7FFFFFFF - ids).to(tl.int64)


@triton.jit
def _largest(keys, k, TOP: tl.constexpr):
    """The ``k`` largest of ``keys``, largest first, in a ``[TOP]`` vector (NO_KEY past ``k``)."""
    place = tl.arange(0, TOP)
    picked = tl.full((TOP,), NO_KEY, tl.int64)
    for j in range(k):
        best = tl.max(keys, axis=0)
        picked = tl.where(place == j, best, picked)
        keys = tl.where(keys == best, NO_KEY, keys)
    return picked


@triton.jit
def _logprobs_kernel(logits_ptr, targets_ptr, scratch_ptr, counters_ptr, out_ptr, V, stride, chunks, k,
                     BLOCK: tl.constexpr, BLOCK_CHUNKS: tl.constexpr, BLOCK_KEYS: tl.constexpr, TOP: tl.constexpr,
                     USE_PDL: tl.constexpr = 0):
    pdl_wait(USE_PDL)
    r, c = tl.program_id(0).to(tl.int64), tl.program_id(1)
    slots = 1 + k                                  # a chunk's scratch: its (max, sum), then its k keys
    row_scratch = scratch_ptr + r * chunks * slots
    stats_ptr = row_scratch.to(tl.pointer_type(tl.float32))
    ids = c * BLOCK + tl.arange(0, BLOCK)
    inside = ids < V
    x = tl.load(logits_ptr + r * stride + ids, mask=inside, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    total = tl.sum(tl.exp(x - tl.where(m == -float("inf"), 0.0, m)), axis=0)   # a chunk of -inf sums 0
    tl.store(stats_ptr + 2 * c * slots, m)
    tl.store(stats_ptr + 2 * c * slots + 1, total)
    picked = _largest(tl.where(inside, _keys(x, ids), NO_KEY), k, TOP)
    place = tl.arange(0, TOP)
    tl.store(row_scratch + c * slots + 1 + place, picked, mask=place < k)
    tl.debug_barrier()          # every thread's stores are made before the arrival releases them
    counter = counters_ptr + r
    if tl.atomic_add(counter, 1, sem="acq_rel") == chunks - 1:     # the row's last chunk merges them all
        i = tl.arange(0, BLOCK_CHUNKS)
        maxes = tl.load(stats_ptr + 2 * i * slots, mask=i < chunks, other=-float("inf"), cache_modifier=".cg")
        sums = tl.load(stats_ptr + 2 * i * slots + 1, mask=i < chunks, other=0.0, cache_modifier=".cg")
        row_max = tl.max(maxes, axis=0)
        shift = tl.where(row_max == -float("inf"), 0.0, row_max)
        lse = shift + tl.log(tl.sum(sums * tl.exp(maxes - shift), axis=0))
        width = 1 + 2 * k
        target = tl.maximum(tl.load(targets_ptr + r), 0)
        chosen = tl.load(logits_ptr + r * stride + target).to(tl.float32)
        tl.store(out_ptr + r * width, chosen - lse)
        j = tl.arange(0, BLOCK_KEYS)
        per_chunk = tl.maximum(k, 1)
        keys = tl.load(row_scratch + (j // per_chunk) * slots + 1 + j % per_chunk, mask=j < chunks * k, other=NO_KEY,
                       cache_modifier=".cg")
        top = _largest(keys, k, TOP)
        bits = (top >> 32).to(tl.int32)
        values = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.float32, bitcast=True)
        top_ids = 0x7FFFFFFF - top.to(tl.int32)               # the low 32 bits
        tl.store(out_ptr + r * width + 1 + place, values - lse, mask=place < k)
        tl.store(out_ptr + r * width + 1 + k + place, top_ids.to(tl.float32), mask=place < k)
        tl.atomic_xchg(counter, 0)


def logprobs(logits: torch.Tensor, targets: torch.Tensor, k: int, out: torch.Tensor) -> torch.Tensor:
    if logits.dim() != 2 or logits.stride(-1) != 1 or logits.dtype not in (torch.float32, torch.float16,
                                                                            torch.bfloat16):
        raise InvalidArgumentError(f"logits must be [R, V] float32, float16 or bfloat16 with a unit last stride, got "
                                   f"{logits.dtype} {tuple(logits.shape)} strides {logits.stride()}")
    R, V = logits.shape
    if targets.shape != (R,) or targets.dtype != torch.int64:
        raise InvalidArgumentError(f"targets must be [{R}] int64, got {targets.dtype} {tuple(targets.shape)}")
    if not 0 <= k <= min(LOGPROBS_MAX_K, V):
        raise InvalidArgumentError(f"k must be in 0..{min(LOGPROBS_MAX_K, V)} (at most {LOGPROBS_MAX_K} and the "
                                   f"vocabulary's {V}), got {k}")
    if out.shape != (R, 1 + 2 * k) or out.dtype != torch.float32 or not out.is_contiguous():
        raise InvalidArgumentError(f"out must be contiguous [{R}, {1 + 2 * k}] float32, got {out.dtype} "
                                   f"{tuple(out.shape)} contiguous {out.is_contiguous()}")
    if R == 0:
        return out
    device = logits.device
    size, chunks, block_chunks, block_keys = _launch_shape(R, V, k, device)
    scratch = torch.empty((R, chunks, 1 + k), dtype=torch.int64, device=device)
    _logprobs_kernel[(R, chunks)](logits, targets, scratch, arrival_counters(device, R), out, V, logits.stride(0),
                                  chunks, k, BLOCK=size, BLOCK_CHUNKS=block_chunks, BLOCK_KEYS=block_keys, TOP=TOP,
                                  num_warps=WARPS, **pdl(device))
    return out


@functools.lru_cache(maxsize=None)
def _launch_shape(R: int, V: int, k: int, device: torch.device) -> tuple[int, int, int, int]:
    """(block, chunks, the merge's chunk and key blocks): the launch's shape, worked out once a shape."""
    size = block(R, V, device)
    chunks = triton.cdiv(V, size)
    return size, chunks, next_power_of_2(chunks), next_power_of_2(chunks * max(k, 1))
