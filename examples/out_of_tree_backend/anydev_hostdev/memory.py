"""The memory of the virtual devices: one libc region per device, handed out by an ``Arena``.

A region is allocated the first time its device allocates, not when the runtime is built, and
libc maps it lazily, so an idle virtual device costs no resident memory.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from . import libc
from .arena import ALIGNMENT, Arena


class VirtualDeviceMemory:
    """The region and allocator of one virtual device."""

    def __init__(self, index: int, size: int):
        self.index = index
        self.size = size // ALIGNMENT * ALIGNMENT
        self._arena: Arena | None = None
        self._lock = threading.Lock()

    def arena(self) -> Arena | None:
        """The allocator, creating the region on first use; None when libc cannot provide it."""
        with self._lock:
            if self._arena is None:
                base = libc.aligned_alloc(self.size, 4096)
                if base:
                    self._arena = Arena(base, self.size)
            return self._arena

    def free_bytes(self) -> int:
        return self.size if self._arena is None else self._arena.free_bytes()

    def owns(self, address: int) -> bool:
        return self._arena is not None and self._arena.owns(address)

    def holds(self, address: int, nbytes: int) -> bool:
        return self._arena is not None and self._arena.holds(address, nbytes)

    def release_region_if_unused(self) -> None:
        """Give the region back to libc unless a block is still allocated (its tensor views must not
        dangle, so such a region lives until the process ends)."""
        with self._lock:
            if self._arena is not None and self._arena.free_bytes() == self.size:
                libc.release(self._arena.base)
                self._arena = None


class _Span:
    """Exposes ``nbytes`` at ``address`` to numpy; keeps ``owner`` alive as long as a view exists."""

    def __init__(self, address: int, nbytes: int, owner: object):
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 3}
        self.owner = owner


def tensor_at(address: int, nbytes: int, owner: object = None) -> torch.Tensor:
    """A 1-D uint8 CPU tensor viewing ``nbytes`` at ``address`` (no copy). Zero bytes give an empty
    tensor of stride 1: numpy's zero-size view has stride 0, which torch cannot reinterpret as
    another dtype (a 0-count collective's buffers)."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.from_numpy(np.asarray(_Span(address, nbytes, owner)))
