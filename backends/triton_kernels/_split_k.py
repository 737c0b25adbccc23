"""Split-K in one launch: each slice of ``K`` stores its float32 partial sums, and the slice that
arrives last at an output tile adds every slice's sums in slice order (the same result whatever order
the slices ran in) and writes the output. Summing in launches of their own costs more than the sum:
two small kernels a split projection (a torch sum, then the cast), each a few microseconds of a small
model's decode step.

Each output tile has an arrival counter on the device, zero between launches: the last slice resets
it. The counters are kept per device and host thread, because a rank's kernels run in order on its one
stream, so two launches never share them at once. A device graph captures the counters' address, so
they must exist before any capture: the first split call of a thread on a device allocates them, and
``core.rank.graphs.capture_graph`` runs a step once before it captures it."""
from __future__ import annotations

import threading

import torch

from anydev.plugin_api.errors import InvalidArgumentError

from ._common import tl, triton

#: Output tiles (a launch's programs for one slice) that a split launch may have. Plans split ``K``
#: only when their tiles alone leave the device idle: a few hundred at most.
MAX_TILES = 1 << 16

_per_thread = threading.local()


def arrival_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """This thread's zeroed int32 counters on ``device``, at least ``tiles`` of them."""
    if tiles > MAX_TILES:
        raise InvalidArgumentError(f"a split-K launch of {tiles} output tiles: at most {MAX_TILES} (use a plan "
                                   "of larger blocks, or split=1)")
    per_device = _per_thread.__dict__.setdefault("counters", {})
    if device not in per_device:
        per_device[device] = torch.zeros(MAX_TILES, dtype=torch.int32, device=device)
    return per_device[device]


@triton.jit
def store_summed(acc, out_ptr, partial_ptr, counters_ptr, offsets, mask, M, N, SLICES: tl.constexpr):
    """Write ``acc`` (this program's float32 sums of ``offsets`` into the ``[M, N]`` output) to
    ``out_ptr``; with more than one of ``SLICES``, through ``partial_ptr`` ``[SLICES, M, N]`` as the
    module says. ``SLICES`` is a constant so that the last slice's loads are unrolled and in flight
    together."""
    if SLICES > 1:
        pid_n, pid_k, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        tl.store(partial_ptr + pid_k.to(tl.int64) * M * N + offsets, acc, mask=mask)   # M may be a constant 1
        tl.debug_barrier()          # every thread's partial sums are stored before the arrival releases them
        counter = counters_ptr + pid_m * tl.num_programs(0) + pid_n
        if tl.atomic_add(counter, 1, sem="acq_rel") == SLICES - 1:
            slice_ptr = partial_ptr + offsets
            total = tl.load(slice_ptr, mask=mask, cache_modifier=".cg")   # from L2, not a stale L1
            for _ in tl.static_range(1, SLICES):
                slice_ptr += M * N
                total += tl.load(slice_ptr, mask=mask, cache_modifier=".cg")
            tl.store(out_ptr + offsets, total.to(out_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(counter, 0)
    else:
        tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)
