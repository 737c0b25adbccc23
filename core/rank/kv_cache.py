"""A rank's paged KV cache: one device buffer holding every layer's K and V pages.

Layout (one allocation): ``[layers, 2 (K, V), num_blocks * block_size slots, local KV heads, head_dim]``.
A sequence's tokens live in the blocks its block table names (see :mod:`.scheduler`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from anydev.plugin_api import Device, DeviceBuffer, Stream

from ..errors import EngineConfigError


@dataclass(frozen=True)
class KVLayout:
    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int   # on this rank
    head_dim: int
    dtype: torch.dtype

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.num_layers, 2, self.num_slots, self.num_kv_heads, self.head_dim)

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes over all layers, K and V."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return self.num_layers * 2 * self.block_size * self.num_kv_heads * self.head_dim * itemsize

    @property
    def nbytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def layer_bytes(self) -> int:
        return self.nbytes // self.num_layers


def check_fits(layout: KVLayout, free_bytes: int, memory_fraction: float, rank: int) -> None:
    """Raise :class:`EngineConfigError` (saying how many blocks fit) when the cache does not fit in
    ``free_bytes * memory_fraction``."""
    budget = int(free_bytes * memory_fraction)
    if layout.nbytes > budget:
        fit = budget // layout.block_bytes
        raise EngineConfigError(
            f"KV cache of {layout.num_blocks} blocks needs {layout.nbytes / 2**30:.2f} GiB on rank {rank}, but only "
            f"{budget / 2**30:.2f} GiB is usable ({free_bytes / 2**30:.2f} GiB free after weights x memory_fraction "
            f"{memory_fraction}); at most {fit} blocks of {layout.block_size} tokens fit: pass num_blocks <= {fit} "
            f"or a smaller block_size / max_model_len"
        )


class PagedKVCache:
    """The KV pool of one rank on ``device``, zeroed by one device memset (``zero_async``)."""

    def __init__(self, device: Device, layout: KVLayout):
        self.layout = layout
        self.buffer: DeviceBuffer = device.alloc(layout.nbytes)
        self.pool = self.buffer.as_tensor(layout.dtype, layout.shape)

    def zero_async(self, stream: Stream) -> None:
        """One device memset for the whole pool, enqueued on ``stream`` (no host memory, no sync)."""
        stream.memset_async(self.buffer, 0)

    def layer(self, index: int) -> torch.Tensor:
        """Layer ``index``'s K and V pages, [2 (K, V), slots, KV heads, head_dim]."""
        return self.pool[index]

    def close(self) -> None:
        self.pool = None
        self.buffer.close()
