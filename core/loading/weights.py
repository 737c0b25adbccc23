"""A rank's weights on its device: one buffer, one slice per tensor, read straight from the checkpoint.

Each rank reads only its shard (the byte ranges of its slice of every tensor; replicated tensors whole)
into its own pinned staging buffers, a block of rows at a time and several reader threads per block,
and copies each block to the device asynchronously on its stream while the next block is read. A dtype
change (say a float32 or float16 checkpoint run in bfloat16) happens on the device after the copy, so
the host only ever holds stored bytes, and never more than the staging buffers.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from anydev.plugin_api import Device, Stream

from ..config import expected_tensor_names
from ..models.pipeline import Stage
from ..models.sharding import RankShard, full_shape, local_shape, slice_of
from .staging import PinnedStaging
from .tensor_slices import TensorSlice, row_bytes

_ALIGN = 256
#: Pinned staging memory per rank (two buffers of half this size).
DEFAULT_STAGING_BYTES = 128 << 20
#: A block is split among the reader threads in parts of at least this many bytes.
_MIN_PART_BYTES = 1 << 20


@dataclass
class LoadStats:
    """Where one rank's weight load spent its time (seconds on the rank's thread)."""

    stored_bytes: int = 0        # bytes copied host→device: the checkpoint's dtype (GGUF quants: float32)
    device_bytes: int = 0        # bytes of weights on the device (the engine's dtype)
    seconds: float = 0.0         # the whole load, until the last copy (and conversion) finished
    open_seconds: float = 0.0    # opening each tensor's slice (headers, shape checks)
    read_seconds: float = 0.0    # filling staging buffers from the checkpoint (GGUF: dequantizing too)
    wait_seconds: float = 0.0    # waiting for a staging buffer the device was still copying from
    blocks: int = 0

    @property
    def gbps(self) -> float:
        """Stored bytes per second of the whole load, in GB/s."""
        return self.stored_bytes / self.seconds / 1e9 if self.seconds else 0.0


class RankWeights:
    """The weight shard of one rank: ``tensors`` maps HF names to device tensors (views of one buffer)."""

    def __init__(self, device: Device, config, shard: RankShard, dtype: torch.dtype, stage: Stage | None = None):
        """``stage``: load only that pipeline stage's tensors (see :mod:`.models.pipeline`); None: all."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        self.device = device
        self.dtype = dtype
        self.shard = shard
        self.config = config
        self.stats = LoadStats()
        self.offsets: dict[str, tuple[int, tuple[int, ...]]] = {}
        total = 0
        for name in expected_tensor_names(config):
            if stage is not None and not stage.holds(name, config.tie_word_embeddings):
                continue
            shape = local_shape(name, config, shard)
            self.offsets[name] = (total, shape)
            total += -(-math.prod(shape) * itemsize // _ALIGN) * _ALIGN
        self.nbytes = total
        self.buffer = device.alloc(total)
        self.tensors: dict[str, torch.Tensor] = {
            name: self.buffer.as_tensor(dtype, shape, offset) for name, (offset, shape) in self.offsets.items()
        }

    def load(self, checkpoint, stream: Stream, check_cancel: Callable[[], None], on_bytes: Callable[[int], None],
             staging_bytes: int = DEFAULT_STAGING_BYTES, read_threads: int = 1) -> LoadStats:
        """Copy the rank's slice of every tensor of ``checkpoint`` into this buffer; returns when every
        copy has finished. ``check_cancel`` runs before each block (it raises to stop); ``on_bytes``
        reports progress in device bytes; ``read_threads`` threads read each block."""
        start = time.perf_counter()
        self._read_threads = read_threads
        staging = PinnedStaging(self.device, staging_bytes)
        readers = ThreadPoolExecutor(read_threads, thread_name_prefix=f"anydev-rank{self.shard.rank}-read") \
            if read_threads > 1 else None
        scratch = None   # device memory for a block still in the stored dtype, when that differs
        try:
            for name, (offset, shape) in self.offsets.items():
                t = time.perf_counter()
                piece = self._open(checkpoint, name, shape)
                self.stats.open_seconds += time.perf_counter() - t
                if piece.dtype != self.dtype and scratch is None:
                    scratch = self.device.alloc(staging.buffer_bytes)
                self._copy(piece, name, offset, staging, stream, scratch, readers, check_cancel, on_bytes)
        finally:
            try:
                staging.close()   # waits for the last copies (and conversions) out of the buffers
            finally:
                if readers is not None:
                    readers.shutdown()
                if scratch is not None:
                    scratch.close()
        self.stats.seconds = time.perf_counter() - start
        return self.stats

    def _open(self, checkpoint, name: str, shape: tuple[int, ...]) -> TensorSlice:
        from .checkpoint import ModelLoadError

        piece = checkpoint.tensor_slice(name, slice_of(name, self.shard))
        expected = full_shape(name, self.config)
        if tuple(piece.full_shape) != expected:
            raise ModelLoadError(
                f"{checkpoint.source}: tensor {name} has shape {tuple(piece.full_shape)}, the config implies {expected}"
            )
        if tuple(piece.shape) != shape:
            raise ModelLoadError(f"{checkpoint.source}: the slice of {name} for rank {self.shard.rank} is "
                                 f"{tuple(piece.shape)}, expected {shape}")
        return piece

    def _copy(self, piece: TensorSlice, name, offset, staging, stream, scratch, readers, check_cancel, on_bytes):
        """The slice block by block: read into a staging buffer, copy to the device (then convert there)."""
        shape = piece.shape
        rows, in_row = shape[0], row_bytes(piece)
        out_row = math.prod(shape[1:]) * torch.empty((), dtype=self.dtype).element_size()
        per_block = staging.buffer_bytes // in_row
        if per_block < 1:
            raise ValueError(f"a row of {name} ({in_row} bytes) does not fit a staging buffer of "
                             f"{staging.buffer_bytes} bytes; raise the staging size")
        for first in range(0, rows, per_block):
            check_cancel()
            count = min(per_block, rows - first)
            t = time.perf_counter()
            index, host, array = staging.acquire()
            t_read = time.perf_counter()
            self._read(piece, first, count, array[:count * in_row], readers, self._read_threads)
            self.stats.wait_seconds += t_read - t
            self.stats.read_seconds += time.perf_counter() - t_read
            dst_offset = offset + first * out_row
            if piece.dtype == self.dtype:
                stream.memcpy_async(self.buffer, host, count * in_row, dst_offset=dst_offset)
            else:   # the conversion runs on the device, in stream order after the copy
                stream.memcpy_async(scratch, host, count * in_row)
                with stream.torch_stream():
                    stored = scratch.as_tensor(piece.dtype, (count, *shape[1:]))
                    self.buffer.as_tensor(self.dtype, (count, *shape[1:]), dst_offset).copy_(stored)
            staging.release(index, stream)
            self.stats.stored_bytes += count * in_row
            self.stats.device_bytes += count * out_row
            self.stats.blocks += 1
            on_bytes(count * out_row)

    @staticmethod
    def _read(piece: TensorSlice, first: int, count: int, out: np.ndarray, readers, threads: int) -> None:
        """Rows ``[first, first + count)`` of ``piece`` into ``out``, split among the reader threads."""
        in_row = out.nbytes // count
        parts = 1 if readers is None else max(1, min(threads, out.nbytes // _MIN_PART_BYTES, count))
        if parts == 1:
            piece.read_rows(first, count, out)
            return
        bounds = [first + count * i // parts for i in range(parts + 1)]
        futures = [readers.submit(piece.read_rows, a, b - a, out[(a - first) * in_row:(b - first) * in_row])
                   for a, b in zip(bounds, bounds[1:])]
        for future in futures:
            future.result()

    def close(self) -> None:
        self.tensors = {}
        self.buffer.close()
