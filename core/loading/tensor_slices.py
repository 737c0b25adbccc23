"""A rank's slice of one checkpoint tensor, read a block of rows at a time into memory the caller owns
(the rank's pinned staging buffer), in the dtype the checkpoint stores.

A slice is what :func:`anydev.core.models.sharding.slice_of` says: ``(dim, start, length)`` of the
tensor in HF layout, or ``None`` for the whole tensor. Its rows are the rows of the slice (dimension 0);
``read_rows(first, count, out)`` writes rows ``[first, first + count)`` contiguously into ``out``.
Stores that can read part of a tensor (safetensors files, GGUF) give their own slices; for the others
(tensors already in memory) :class:`HostTensorSlice` narrows the whole tensor.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

class TensorSlice(Protocol):
    full_shape: tuple[int, ...]   # the tensor's shape in the checkpoint (HF layout)
    shape: tuple[int, ...]        # the slice's shape
    dtype: torch.dtype            # the stored dtype: what ``read_rows`` writes

    def read_rows(self, first: int, count: int, out: np.ndarray) -> None:
        """Write rows ``[first, first + count)`` of the slice, contiguous, into the uint8 array ``out``
        (``count * row_bytes(self)`` bytes). Safe to call from several threads for different rows."""


def row_bytes(piece: TensorSlice) -> int:
    """Bytes of one row of the slice (a 1-D slice's rows are single elements)."""
    return _numel(piece.shape[1:]) * torch.empty((), dtype=piece.dtype).element_size()


def sliced_shape(full_shape: tuple[int, ...], cut) -> tuple[int, ...]:
    shape = list(full_shape)
    if cut is not None:
        dim, start, length = cut
        if not 0 <= start and start + length <= shape[dim]:
            raise ValueError(f"slice [{start}, {start + length}) of dim {dim} is outside shape {tuple(full_shape)}")
        shape[dim] = length
    return tuple(shape)


class HostTensorSlice:
    """The slice ``cut`` of a tensor already in host memory (a view; rows copied on read). With
    ``full_shape``, ``tensor`` is the slice itself, cut from a tensor of that shape."""

    def __init__(self, tensor: torch.Tensor, cut, full_shape: tuple[int, ...] | None = None):
        if full_shape is not None:
            self.full_shape, self.shape, self._part = tuple(full_shape), tuple(tensor.shape), tensor
        else:
            self.full_shape = tuple(tensor.shape)
            self.shape = sliced_shape(self.full_shape, cut)
            self._part = tensor if cut is None else tensor.narrow(*cut)
        self.dtype = tensor.dtype

    def read_rows(self, first: int, count: int, out: np.ndarray) -> None:
        rows = self._part.narrow(0, first, count)
        torch.from_numpy(out).view(self.dtype).view(rows.shape).copy_(rows)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
