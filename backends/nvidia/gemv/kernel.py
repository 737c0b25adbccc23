"""The nvidia backend's ``quantized_linear``: its own batch-1 GEMVs (``gemv.cu``) where they are faster
than the Triton kernel's, the Triton kernel everywhere else."""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Callable

import torch

from anydev.plugin_api.errors import BackendUnavailableError, InvalidArgumentError
from anydev.plugin_api.weight_formats import check_weight


@dataclasses.dataclass(frozen=True)
class Gemv:
    """One weight format's GEMV in gemv.cu: its kernels' name, K's step (a multiple of 256; q6_k_split's
    rows are 16-byte aligned at 2,048) and largest value. Each block rounds x to int8 in shared memory,
    :meth:`shared_bytes`: any K here fits the 48 KB a block has without opting in. ``warp_rows``: the
    rows a warp takes (a block takes ``WARPS * warp_rows``). ``padded``: x rounded with gemv.cu's
    padding (``round_x``)."""
    kernel: str
    k_step: int
    max_k: int
    warp_rows: int = 1
    padded: bool = False

    def shared_bytes(self, K: int) -> int:
        """A block's shared memory at ``K`` inputs: the int8 codes, then a float scale and sum a 32."""
        if self.padded:      # 16 bytes after each 256 codes, a float after each 8 scales and sums
            return K + K // 16 + K // 4 + K // 32
        return K + K // 4


#: The formats with a GEMV here. q4_k and q8_0_split stop at 8,192 inputs: the Triton GEMV's K split
#: spreads a longer row (the down projection's) over several programs and reads it faster.
#: q6_k_split's GEMV reads it faster here; q4_0's and q4_1's take it too. They take two rows a warp (a
#: lane takes 8 blocks at once, a row 16 lanes).
GEMVS = {"q4_k": Gemv("q4k", 256, 8192), "q8_0_split": Gemv("q8s", 256, 8192),
         "q6_k_split": Gemv("q6s", 2048, 16384),
         "q4_0": Gemv("q40", 256, 16384, warp_rows=2, padded=True),
         "q4_1": Gemv("q41", 256, 16384, warp_rows=2, padded=True)}
WARPS = 8


#: ``0``: the Triton kernel for every call (to compare the two, or where libnvrtc is missing); ``1``
#: (the default): these GEMVs where :func:`takes` says.
ENV = "ANYDEV_NVIDIA_GEMV"
#: gemv.cu's entry points: each format's kernel in each programmatic dependent launch mode (0-3).
KERNELS = [f"{gemv.kernel}_gemv_{mode}" for gemv in GEMVS.values() for mode in range(4)]


def enabled() -> bool:
    value = os.environ.get(ENV, "1")
    if value not in ("0", "1"):
        raise InvalidArgumentError(f"{ENV}={value!r}: use 1 (the nvidia backend's own batch-1 GEMVs, the "
                                   "default) or 0 (the Triton kernel everywhere)")
    return value == "1"


def fits(weight_format: str, rows: int, K: int, dtype: torch.dtype) -> bool:
    """The GEMVs' own limits: one row of bfloat16, a format of :data:`GEMVS`, K a multiple of its step
    and at most its largest."""
    gemv = GEMVS.get(weight_format)
    return gemv is not None and rows == 1 and dtype == torch.bfloat16 and K % gemv.k_step == 0 and K <= gemv.max_k


def takes(x: torch.Tensor, weight: torch.Tensor, weight_format: str) -> bool:
    """Whether this call runs a GEMV of gemv.cu: it :func:`fits`, on a CUDA device of compute capability
    8.0 or later, x contiguous, x and the weight 16-byte aligned, the weight's rows contiguous, and
    :data:`ENV` not 0."""
    return (x.device.type == "cuda" and x.dim() == 2 and fits(weight_format, x.shape[0], x.shape[1], x.dtype)
            and x.is_contiguous() and x.data_ptr() % 16 == 0 and weight.is_contiguous()
            and weight.data_ptr() % 16 == 0
            and _capability(x.device.index)[0] >= 8 and enabled())


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def compile_gemvs(arch: int) -> bytes:
    """gemv.cu as a cubin for ``sm_{arch}`` (compiled once, then from NVRTC's cache); where NVRTC is
    missing, the BackendUnavailableError says how to do without it."""
    from .nvrtc import cached_cubin

    try:
        return cached_cubin((Path(__file__).parent / "gemv.cu").read_text(), "gemv.cu", arch)
    except BackendUnavailableError as error:
        raise BackendUnavailableError(
            error.backend, f"{error.reason}; the nvidia backend compiles its batch-1 GEMVs with it at first use "
            f"(CUDA builds of torch bring it): install it, or set {ENV}=0 to run the Triton kernel instead",
            error.searched) from None


@functools.lru_cache(maxsize=None)
def _module(index: int):
    """gemv.cu compiled for device ``index``'s architecture and loaded into its primary context."""
    from .driver import Module

    major, minor = _capability(index)
    cubin = compile_gemvs(10 * major + minor)
    with torch.cuda.device(index):
        return Module(cubin, KERNELS)


def launch(module, x: torch.Tensor, weight: torch.Tensor, weight_format: str, pdl_mode: int,
           warps: int = WARPS) -> torch.Tensor:
    """``x @ W.T`` by ``module``'s kernel of ``weight_format`` (a cubin of gemv.cu, or of a variant of it
    with the same entry points), for a call :func:`takes`: ``[1, N]`` bfloat16, on the current stream;
    ``pdl_mode`` as the Triton kernels' (``_common.pdl``); ``warps``: a block's warps, as ``module``
    was compiled (gemv.cu's ``WARPS``)."""
    K, N = x.shape[-1], weight.shape[0]
    out = torch.empty(1, N, dtype=torch.bfloat16, device=x.device)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    pointers = [("uint64_t", weight.data_ptr()), ("uint64_t", x.data_ptr()), ("uint64_t", out.data_ptr())]
    shape = [("int", N), ("int", K), ("int64_t", weight.stride(0))]
    spec = GEMVS[weight_format]
    module.launch(f"{spec.kernel}_gemv_{pdl_mode}", -(-N // (warps * spec.warp_rows)), 32 * warps,
                  spec.shared_bytes(K), stream, [*pointers, *shape], programmatic=pdl_mode > 0)
    return out


def gemv(x: torch.Tensor, weight: torch.Tensor, weight_format: str, pdl_mode: int) -> torch.Tensor:
    """:func:`launch` on the GEMVs compiled for ``x``'s device (weights checked by the caller)."""
    return launch(_module(x.device.index), x, weight, weight_format, pdl_mode)


def with_gemvs(triton_quantized_linear: Callable) -> Callable:
    """``quantized_linear`` (the contract's signature) that runs :func:`gemv` where :func:`takes` says
    and ``triton_quantized_linear`` otherwise."""
    from anydev.backends.triton_kernels._common import pdl

    @functools.wraps(triton_quantized_linear)      # __wrapped__: the conformance plan checks call it
    def quantized_linear(x, weight, scales, weight_format):
        if takes(x, weight, weight_format):
            check_weight(weight, scales, weight_format, x.shape[-1])
            return gemv(x, weight, weight_format, pdl(x.device)["USE_PDL"])
        return triton_quantized_linear(x, weight, scales, weight_format)

    return quantized_linear
