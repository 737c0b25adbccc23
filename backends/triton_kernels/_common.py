"""Small helpers shared by the Triton kernel wrappers."""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from anydev.plugin_api.errors import InvalidArgumentError, NotSupportedError

LOG2E = 1.4426950408889634


def dot_precision(dtype: torch.dtype) -> str | None:
    """``tl.dot``'s input precision: exact float32 products for float32 inputs (not TF32), as the
    kernels' float32 tolerance assumes; 16-bit inputs are multiplied exactly anyway."""
    return "ieee" if dtype == torch.float32 else None


def check_last_dim_contiguous(name: str, tensor: torch.Tensor) -> None:
    if tensor.stride(-1) != 1:
        raise InvalidArgumentError(f"{name}: the last dimension must be contiguous (stride 1), got strides {tensor.stride()}")


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise InvalidArgumentError(
            f"k_cache/v_cache must be contiguous [num_blocks, block_size, num_kv_heads, head_dim] of one shape; "
            f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )


def upcast_dots(dtype: torch.dtype, device: torch.device) -> bool:
    """True where ``tl.dot`` must get float32 operands: Triton's interpreter (CPU tensors; triton 3.9)
    multiplies bfloat16 dots wrongly. Compiled kernels never upcast."""
    return device.type == "cpu" and dtype == torch.bfloat16


@triton.jit
def dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``tl.dot(a, b)`` with float32 accumulation (see :func:`upcast_dots` for UPCAST)."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision=PRECISION)


@functools.lru_cache(maxsize=None)
def programs_to_fill(device: torch.device) -> int:
    """How many 4-warp programs keep a device busy: 4 per multiprocessor of a CUDA-like device (enough
    warps to hide memory latency); 32 elsewhere (Triton's interpreter on CPU), so that CI's small
    shapes exercise both the split and the unsplit decode paths."""
    module = getattr(torch, device.type, None)     # torch.cuda, torch.musa (torch_musa)
    if device.type != "cpu" and hasattr(module, "get_device_properties"):
        return 4 * module.get_device_properties(device).multi_processor_count
    return 32


#: ``ANYDEV_TRITON_PDL`` launches the decode path's kernels with programmatic dependent launch on
#: NVIDIA GPUs of compute capability 9.0 and later, each waiting (``griddepcontrol.wait``) for the
#: kernel before it to finish before touching memory: ``1`` lets the next kernel be scheduled as soon
#: as every program of this one has started (``launch_dependents`` after the wait), ``2`` only once
#: this one ends, ``3`` as 1 with each program of a linear kernel first asking the L2 cache for the
#: first tile of its weights (:func:`prefetch_rows`: no kernel before it writes them). Unset: mode
#: :data:`PDL_DEFAULT`; ``0`` turns it off.
PDL_ENV = "ANYDEV_TRITON_PDL"
PDL_MODES = {"0": 0, "1": 1, "2": 2, "3": 3}
#: The mode where ``ANYDEV_TRITON_PDL`` is unset (docs/backends.md says why this one).
PDL_DEFAULT = "3"


@functools.lru_cache(maxsize=None)
def _pdl_mode(device: torch.device) -> int:
    value = os.environ.get(PDL_ENV)
    if value is not None and value not in PDL_MODES:
        raise InvalidArgumentError(f"{PDL_ENV}={value!r}: use 0 (off), 1 (the next kernel scheduled early), 2 "
                                   "(the next kernel scheduled at this one's end) or 3 (as 1, the linear kernels "
                                   "prefetching their first weights before they wait)")
    if device.type != "cuda" or torch.version.hip is not None or torch.cuda.get_device_capability(device)[0] < 9:
        return 0
    if not _triton_has_pdl():
        if value not in (None, "0"):
            raise NotSupportedError(f"{PDL_ENV}={value}: Triton {triton.__version__} has no programmatic dependent "
                                    "launch (tl.extra.cuda.gdc_wait); install a newer Triton or set it to 0")
        return 0        # unset: the default mode needs what this Triton lacks
    return PDL_MODES[PDL_DEFAULT if value is None else value]


def _triton_has_pdl() -> bool:
    return hasattr(getattr(tl.extra, "cuda", None), "gdc_wait")


def pdl(device: torch.device) -> dict:
    """A launch's programmatic-dependent-launch arguments on ``device`` (see :data:`PDL_ENV`): the
    kernel's ``USE_PDL`` mode and, where on, Triton's ``launch_pdl``. Every kernel launched with
    ``launch_pdl`` must call :func:`pdl_wait` before its first memory access."""
    mode = _pdl_mode(device)
    return {"USE_PDL": mode, "launch_pdl": True} if mode else {"USE_PDL": 0}


@triton.jit
def pdl_wait(USE_PDL: tl.constexpr):
    """USE_PDL 1, 2 or 3: wait until the kernel before this one has finished and its writes are visible;
    1 and 3 then let the next kernel be scheduled. 0: nothing."""
    if USE_PDL > 0:
        tl.extra.cuda.gdc_wait()
    if USE_PDL == 1 or USE_PDL == 3:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_rows(w_ptr, rows, ROW_ELEMS, K, k_start, K_PER_SPLIT, LINES: tl.constexpr):
    """Ask the L2 cache for the first ``LINES`` 128-byte lines of weight rows ``rows`` (int64, in
    range) from input ``k_start`` on, no further than the slice's end (``K_PER_SPLIT`` inputs): a hint
    (PTX ``prefetch.global.L2``) that loads nothing into registers. ``ROW_ELEMS``: a row's length in
    ``w_ptr``'s elements, whose bytes are spread evenly over its ``K`` inputs."""
    row = ROW_ELEMS * (w_ptr.dtype.element_ty.primitive_bitwidth // 8)     # int32: a row's bytes fit
    start = k_start.to(tl.int32)
    first = start * row // K
    last = tl.minimum((start + K_PER_SPLIT) * row // K, row) - 1
    offsets = tl.minimum(first + tl.arange(0, LINES) * 128, last)
    lines = w_ptr.to(tl.pointer_type(tl.uint8)) + rows[:, None] * row + offsets[None, :]
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [lines], dtype=tl.int32,
                              is_pure=False, pack=1)


def next_power_of_2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


__all__ = ["LOG2E", "tl", "triton", "dot_precision", "check_cache", "check_last_dim_contiguous",
           "programs_to_fill", "next_power_of_2", "dot", "upcast_dots", "pdl", "pdl_wait", "prefetch_rows", "PDL_ENV"]
