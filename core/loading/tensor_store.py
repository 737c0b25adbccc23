"""Where a checkpoint's tensors come from: the TensorStore interface and its in-memory store."""
from __future__ import annotations

from typing import Protocol

import torch


class TensorStore(Protocol):
    """Where a checkpoint's tensors come from; names and tensors in HF layout.

    A store that can read part of a tensor also has ``tensor_slice(name, cut) -> TensorSlice``
    (:mod:`.tensor_slices`); for the others a slice narrows the whole tensor from ``load``.
    """

    def names(self) -> list[str]: ...
    def load(self, name: str) -> torch.Tensor: ...
    def close(self) -> None: ...


class InMemoryStore:
    """A TensorStore over a dict of CPU tensors (the demo model; tests)."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self._tensors = dict(tensors)

    def names(self) -> list[str]:
        return list(self._tensors)

    def load(self, name: str) -> torch.Tensor:
        return self._tensors[name]

    def close(self) -> None:
        pass   # nothing is held open; the tensors stay usable for other Checkpoint handles
