"""The domains of the kernels group: the dtypes and weight formats a backend offers for each kernel,
and the shapes of the full sweep and of the quick one (``--quick``).

The full sweep runs whatever the torch device (a host-memory backend's kernels are certified at the
engine's real shapes too); ``--quick`` is the sweep Triton's interpreter can run in CI, and a verdict
earned with it says "(quick sweep)" (``report.py``).

What a backend offers is asked of the contract's capability query, ``KernelSet.supports`` (contract
1.6, a ``KernelOffer``'s dtypes and weight formats), through :func:`offered` only: every check
iterates over the contract's dtypes and formats, checks those the backend offers and reports the rest
as skipped "not offered", so the sweep covers exactly what a backend offers.
"""
from __future__ import annotations

import dataclasses
import itertools

import torch

from anydev.plugin_api.kernel_offers import ACTIVATION_DTYPES

#: The activation dtypes the contract's kernels take (``ACTIVATION_DTYPES``), as torch dtypes.
DTYPES = tuple(getattr(torch, name) for name in ACTIVATION_DTYPES)


def offered(kernels, name: str, dtype, weight_format: str | None = None) -> bool:
    """True when the backend's KernelSet ``kernels`` runs its own ``name`` for activations of
    ``dtype`` (and ``weight_format``): the one place the sweep asks what a backend offers."""
    return kernels.supports(name, dtype, weight_format)


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    group: int          # query heads per KV head (GQA ratio)
    head_dim: int
    block_size: int

    def __str__(self) -> str:
        return f"GQA {self.group}, head_dim {self.head_dim}, block_size {self.block_size}"


def attention_shapes(quick: bool) -> list[AttentionShape]:
    """GQA 1, 4, 8 x head_dim 64, 128 x block_size 16, 32 (quick: 3 of the 12)."""
    if quick:
        return [AttentionShape(1, 64, 16), AttentionShape(4, 128, 32), AttentionShape(8, 64, 32)]
    return [AttentionShape(*c) for c in itertools.product((1, 4, 8), (64, 128), (16, 32))]


def long_context(quick: bool) -> int:
    """The longest context of the attention checks (where split kernels take several partitions)."""
    return 600 if quick else 3000


def windows(shape: AttentionShape, first: bool, quick: bool) -> tuple:
    """No sliding window, and one a few tokens past a block (quick: the first shape only)."""
    if quick and not first:
        return (None,)
    return (None, shape.block_size + 5)


def norm_shapes(quick: bool) -> tuple[tuple[int, int, float], ...]:
    """(T, N, eps) of rms_norm: one row, ragged N, and the hidden sizes of real models (4096: Llama
    8B; 8192: Llama 70B, in the full sweep)."""
    shapes = ((1, 64, 1e-5), (7, 1000, 1e-6), (5, 2048, 1e-5), (3, 4096, 1e-5))
    return shapes if quick else shapes + ((2, 8192, 1e-5),)


def silu_shapes(quick: bool) -> tuple[tuple[int, int], ...]:
    """(T, I) of silu_and_mul: I up to Llama 8B's intermediate size 14336 in the full sweep."""
    shapes = ((1, 64), (5, 1000), (3, 2816))
    return shapes if quick else shapes + ((1, 14336),)


def linear_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """(T, N, K): decode's one row, a few rows, more than 16 rows; K a multiple of 256 (GGUF K-quant
    blocks); in the full sweep the projections of a Llama 8B layer at decode (4096 -> 4096,
    14336 -> 4096). Each sweep has one row of an N that is not a multiple of 8 (a kernel's last group
    of outputs part-filled: e.g. 8 rows a block); the full sweep's has K = 6,144, not a power of two
    but a multiple of 2,048, so that a GEMV limited to such rows is checked there too."""
    if quick:
        return [(1, 37, 512), (3, 24, 768), (20, 40, 512)]
    return [(1, 4096, 4096), (1, 1001, 6144), (5, 512, 4096), (16, 640, 1024), (33, 256, 1024), (128, 384, 512),
            (1, 4096, 14336)]
