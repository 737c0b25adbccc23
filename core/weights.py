"""A rank's weights on its device: one buffer, one slice per tensor, filled host→device on the stream."""
from __future__ import annotations

from typing import Callable

import torch

from anydev.plugin_api import Device, Stream

from .config import expected_tensor_names
from .models.sharding import RankShard, full_shape, local_shape, shard_tensor

_ALIGN = 256
# Pageable host tensors stay referenced by the stream until it synchronises: bound what is held.
_MAX_PENDING_HOST_BYTES = 256 << 20


class RankWeights:
    """The weight shard of one rank: ``tensors`` maps HF names to device tensors (views of one buffer)."""

    def __init__(self, device: Device, config, shard: RankShard, dtype: torch.dtype):
        itemsize = torch.empty((), dtype=dtype).element_size()
        self.dtype = dtype
        self.shard = shard
        self.config = config
        self.offsets: dict[str, tuple[int, tuple[int, ...]]] = {}
        total = 0
        for name in expected_tensor_names(config):
            shape = local_shape(name, config, shard)
            self.offsets[name] = (total, shape)
            total += -(-_numel(shape) * itemsize // _ALIGN) * _ALIGN
        self.nbytes = total
        self.buffer = device.alloc(total)
        self.tensors: dict[str, torch.Tensor] = {
            name: self.buffer.as_tensor(dtype, shape, offset) for name, (offset, shape) in self.offsets.items()
        }

    def load(self, checkpoint, stream: Stream, check_cancel: Callable[[], None],
             on_bytes: Callable[[int], None]) -> None:
        """Copy every tensor's shard from ``checkpoint`` into this buffer, asynchronously on ``stream``.

        ``check_cancel`` runs before each tensor (it raises to stop); ``on_bytes`` reports progress.
        """
        from .checkpoint import ModelLoadError

        pending = 0
        for name, (offset, _) in self.offsets.items():
            check_cancel()
            host = checkpoint.load(name)   # Checkpoint.load is thread-safe: ranks read at once
            expected = full_shape(name, self.config)
            if tuple(host.shape) != expected:
                raise ModelLoadError(
                    f"{checkpoint.source}: tensor {name} has shape {tuple(host.shape)}, the config implies {expected}"
                )
            part = shard_tensor(name, host, self.shard).to(self.dtype).contiguous()
            nbytes = part.numel() * part.element_size()
            stream.memcpy_async(self.buffer, part, nbytes, dst_offset=offset)
            pending += nbytes
            if pending > _MAX_PENDING_HOST_BYTES:
                stream.synchronize()
                pending = 0
            on_bytes(nbytes)

    def close(self) -> None:
        self.tensors = {}
        self.buffer.close()


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
