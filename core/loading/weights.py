"""A rank's weights on its device: one buffer, one slice per tensor, read straight from the checkpoint.

Each rank reads only its shard (the byte ranges of its slice of every tensor; replicated tensors whole)
into its own pinned staging buffers, a block of rows at a time and several reader threads per block,
and copies each block to the device asynchronously on its stream while the next block is read. A dtype
change (say a float32 or float16 checkpoint run in bfloat16) happens on the device after the copy, so
the host only ever holds stored bytes, and never more than the staging buffers.

Projection weights and the token embedding may stay quantized (``formats``, see
:func:`projection_formats`): GGUF blocks are copied as stored; ``int8``/``fp8_e4m3`` quantize a float
checkpoint's projections per output channel on the device, a block of rows at a time, as it loads. A GGUF
tensor in a block format that does not stay quantized (every tensor under ``quantization="dequantize"``;
the embedding under ``int8``/``fp8``; a rank's part that splits blocks along a row, read as the blocks
that cover it) is copied as stored too and dequantized on the device: the host
never decodes blocks (only a type ``quantized_linear`` lacks is decoded on the host, by the ``gguf``
package). They become
:class:`~anydev.core.models.quantized.QuantizedWeight` values of ``tensors``; per-channel scales sit
after all the weights, in the same order (so fused projections span their parts' scales too).
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from anydev.plugin_api import Device, Stream
from anydev.plugin_api.weight_formats import (BLOCK_FORMATS, CHANNEL_FORMATS, SPLIT_FORMATS, dequantize,
                                             quantize_per_channel, source_format, split_planes, split_rows)
from anydev.plugin_api.weight_formats import row_bytes as format_row_bytes

from ..config import expected_tensor_names
from ..models.pipeline import Stage
from ..models.quantized import QuantizedWeight
from ..models.registry import family_of
from ..models.sharding import RankShard
from .checkpoint_errors import ModelLoadError
from .gguf_checks import block_scales
from .quantization_names import QUANTIZATIONS
from .staging import PinnedStaging
from .tensor_slices import TensorSlice, row_bytes

_ALIGN = 256
#: Pinned staging memory per rank (two buffers of half this size).
DEFAULT_STAGING_BYTES = 128 << 20
#: A block is split among the reader threads in parts of at least this many bytes (small tensors
#: too: the 8B shape's k/v projections are 2.4 MB in Q4_K).
_MIN_PART_BYTES = 256 << 10
#: The linear layers whose weight may be quantized (the lm_head too, when it is not the embedding).
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
#: The token embedding: kept as the checkpoint stores it (its lookup dequantizes only the rows it reads).
EMBEDDING = "model.embed_tokens.weight"


def projection_formats(checkpoint, names, shard: RankShard, quantization: str | None,
                       layouts: dict[str, str] | None = None) -> dict[str, str]:
    """HF name -> weight format of each projection weight of ``names`` (and of the token embedding)
    that stays quantized on the rank: every projection in ``int8``/``fp8_e4m3`` when ``quantization``
    asks for it; else those a GGUF file stores in a block format ``quantized_linear`` reads, where the
    rank's part is whole blocks (unless ``quantization`` is "dequantize"), a projection in the split-row
    layout ``layouts`` names for its block format (:func:`split_layouts`). The embedding stays only as
    stored (``quantization`` None), or per channel where the checkpoint's weights are fp8."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization {quantization!r}: use one of {', '.join(QUANTIZATIONS)} (or none)")
    formats = {}
    slice_of = family_of(checkpoint.config).slice_of
    for name in names:
        if name != EMBEDDING and (not name.endswith(".weight") or name.rsplit(".", 2)[-2] not in PROJECTIONS):
            continue
        stored = checkpoint.stored_format(name, slice_of(name, shard))
        if stored in CHANNEL_FORMATS:        # an fp8 checkpoint: its weights are only usable as stored
            if quantization not in (None, "fp8", stored):
                raise ModelLoadError(f"{checkpoint.source}: its weights are {stored} per channel; quantization "
                                     f"{quantization!r} cannot apply (leave it out, or say fp8)")
            formats[name] = stored
        elif quantization in ("int8", "fp8", "fp8_e4m3") and name != EMBEDDING:
            formats[name] = QUANTIZATIONS[quantization]
        elif quantization is None and stored is not None:
            formats[name] = stored if name == EMBEDDING else (layouts or {}).get(stored, stored)
    return formats


def split_layouts(kernels, dtype: torch.dtype) -> dict[str, str]:
    """Block format -> the split-row format (``SPLIT_FORMATS``) its projections load in: those the
    kernel set's own ``quantized_linear`` takes for ``dtype`` activations (the same values, laid out
    for its GEMV; loaded as stored and split on the device)."""
    return {stored: split for split, stored in SPLIT_FORMATS.items()
            if kernels.supports("quantized_linear", dtype, split)}


@dataclass
class LoadStats:
    """Where one rank's weight load spent its time (seconds on the rank's thread)."""

    stored_bytes: int = 0        # bytes copied host→device: the checkpoint's dtype, or its GGUF blocks
    device_bytes: int = 0        # bytes of weights on the device (the engine's dtype)
    seconds: float = 0.0         # the whole load, until the last copy (and conversion) finished
    open_seconds: float = 0.0    # opening each tensor's slice (headers, shape checks)
    read_seconds: float = 0.0    # filling staging buffers from the checkpoint
    wait_seconds: float = 0.0    # waiting for a staging buffer the device was still copying from
    blocks: int = 0
    formats: str = ""            # the weights' formats and device bytes (RankWeights.describe)
    #: Reading per kind of tensor (the part of its name before ".weight": "q_proj", "embed_tokens",
    #: "input_layernorm", ...): [seconds, stored bytes].
    reads: dict[str, list] = field(default_factory=dict)

    @property
    def gbps(self) -> float:
        """Stored bytes per second of the whole load, in GB/s."""
        return self.stored_bytes / self.seconds / 1e9 if self.seconds else 0.0


class RankWeights:
    """The weight shard of one rank: ``tensors`` maps HF names to device tensors (views of one buffer)."""

    def __init__(self, device: Device, config, shard: RankShard, dtype: torch.dtype, stage: Stage | None = None,
                 formats: dict[str, str] | None = None):
        """``stage``: load only that pipeline stage's tensors (see :mod:`.models.pipeline`); None: all.
        ``formats``: the weight format of each weight kept quantized (:func:`projection_formats`)."""
        self.device = device
        self.dtype = dtype
        self.shard = shard
        self.config = config
        self.family = family_of(config)
        self.stats = LoadStats()
        self.formats = dict(formats or {})
        self.offsets: dict[str, tuple[int, tuple[int, ...]]] = {}
        self.scale_offsets: dict[str, int] = {}
        total = 0
        for name in expected_tensor_names(config):
            if stage is not None and not stage.holds(name, config.tie_word_embeddings):
                continue
            shape = self.family.local_shape(name, config, shard)
            self.offsets[name] = (total, shape)
            total += _aligned(shape[0] * self.row_bytes(name, shape))
        self.formats = {name: fmt for name, fmt in self.formats.items() if name in self.offsets}
        for name, fmt in self.formats.items():
            if fmt in CHANNEL_FORMATS:
                self.scale_offsets[name] = total
                total += _aligned(self.offsets[name][1][0] * 4)
        self.nbytes = total
        self.buffer = device.alloc(total)
        self.tensors: dict[str, torch.Tensor | QuantizedWeight] = {name: self._view(name) for name in self.offsets}

    def row_bytes(self, name: str, shape: tuple[int, ...]) -> int:
        """Device bytes of one row of ``name`` (one element for a 1-D one)."""
        fmt = self.formats.get(name)
        if fmt is None:
            return math.prod(shape[1:]) * torch.empty((), dtype=self.dtype).element_size()
        return format_row_bytes(fmt, shape[1])

    def _view(self, name: str):
        offset, shape = self.offsets[name]
        fmt = self.formats.get(name)
        if fmt is None:
            return self.buffer.as_tensor(self.dtype, shape, offset)
        if fmt in CHANNEL_FORMATS:
            scales = self.buffer.as_tensor(torch.float32, shape[:1], self.scale_offsets[name])
            return QuantizedWeight(self.buffer.as_tensor(CHANNEL_FORMATS[fmt], shape, offset), scales, fmt, shape[1])
        data = self.buffer.as_tensor(torch.uint8, (shape[0], format_row_bytes(fmt, shape[1])), offset)
        return QuantizedWeight(data, None, fmt, shape[1])

    def first_non_finite(self, stream: Stream) -> str | None:
        """The name of the first floating-point weight (or channel scale, or GGUF block scale) that
        holds a NaN or an infinity, or None: one pass over them on the device and one read of the answer. Corrupt
        weights otherwise run, and give empty or meaningless text with no error."""
        checked = [(name, _scales_of(t)) for name, t in self.tensors.items()]
        checked = [(name, t) for name, t in checked if isinstance(t, torch.Tensor)
                   and t.dtype in (torch.float32, torch.float16, torch.bfloat16)]
        if not checked:
            return None
        with stream.torch_stream():
            finite = torch.stack([torch.isfinite(t).all() for _, t in checked]).to("cpu")
        bad = [name for (name, _), ok in zip(checked, finite.tolist()) if not ok]
        return bad[0] if bad else None

    def describe(self) -> str:
        """The formats of the weights and their bytes on the device, e.g. ``bfloat16 35 tensors 0.52 GB,
        q4_k 154 tensors 0.61 GB; 1.13 GB``."""
        counts: dict[str, list[int]] = {}
        for name, tensor in self.tensors.items():
            fmt = self.formats.get(name) or str(self.dtype).removeprefix("torch.")
            entry = counts.setdefault(fmt, [0, 0])
            entry[0] += 1
            entry[1] += tensor.nbytes
        parts = [f"{fmt} {n} tensors {_size(size)}" for fmt, (n, size) in counts.items()]
        return f"{', '.join(parts)}; {_size(sum(size for _, size in counts.values()))}"

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
                piece, blocks = self._open(checkpoint, name, shape)
                self.stats.open_seconds += time.perf_counter() - t
                if (self._converts(name, piece, blocks) or self._unpermutes(piece, blocks)) and scratch is None:
                    scratch = self.device.alloc(staging.buffer_bytes)
                self._copy(piece, blocks, name, offset, staging, stream, scratch, readers, check_cancel, on_bytes)
                if self.formats.get(name) in SPLIT_FORMATS:
                    self._split(name, stream)
                if name in self.scale_offsets and not self._converts(name, piece, blocks):   # scales stored beside
                    scales = checkpoint.channel_scales(name, self.family.slice_of(name, self.shard))
                    with stream.torch_stream():
                        self.buffer.as_tensor(torch.float32, scales.shape, self.scale_offsets[name]).copy_(scales)
        finally:
            try:
                staging.close()   # waits for the last copies (and conversions) out of the buffers
            finally:
                if readers is not None:
                    readers.shutdown()
                if scratch is not None:
                    scratch.close()
        self.stats.seconds = time.perf_counter() - start
        self.stats.formats = self.describe()
        return self.stats

    def _open(self, checkpoint, name: str, shape: tuple[int, ...]) -> tuple[TensorSlice, str | None]:
        """The rank's slice of ``name`` and the GGUF block format it is read in (None: rows of its dtype).
        Whatever is stored in a block format is read as stored (kept, or converted on the device)."""
        cut = self.family.slice_of(name, self.shard)
        stored = checkpoint.stored_format(name, cut)
        if stored is not None and stored == source_format(self.formats.get(name)):    # kept as stored (or split)
            piece = checkpoint.stored_slice(name, cut)
        elif (stored := checkpoint.block_format(name)) is not None:    # GGUF blocks, converted on the device
            piece = checkpoint.block_slice(name, cut)
        else:                                                          # rows of its dtype (stored is None)
            piece = checkpoint.tensor_slice(name, cut)
        expected = self.family.full_shape(name, self.config)
        if tuple(piece.full_shape) != expected:
            raise ModelLoadError(
                f"{checkpoint.source}: tensor {name} has shape {tuple(piece.full_shape)}, the config implies {expected}"
            )
        if tuple(piece.shape) != shape:
            raise ModelLoadError(f"{checkpoint.source}: the slice of {name} for rank {self.shard.rank} is "
                                 f"{tuple(piece.shape)}, expected {shape}")
        return piece, stored if stored in BLOCK_FORMATS else None

    def _copy(self, piece: TensorSlice, blocks: str | None, name, offset, staging, stream, scratch, readers,
              check_cancel, on_bytes):
        """The slice block by block: read into a staging buffer, copy to the device (then convert there)."""
        shape = piece.shape
        fmt = self.formats.get(name)
        converts = self._converts(name, piece, blocks)
        rows, in_row = shape[0], piece.row_bytes if blocks else row_bytes(piece)
        out_row = self.row_bytes(name, shape)
        # Blocks dequantized on the device become float32 rows (of the covering blocks' values, where the
        # slice splits blocks): at most a staging buffer of them at once.
        offset_in_row, decoded = getattr(piece, "covered", None) or (0, shape[-1])
        per_block = staging.buffer_bytes // (max(in_row, 4 * decoded) if blocks and converts else in_row)
        if per_block < 1:
            raise ValueError(f"a row of {name} ({in_row} bytes) does not fit a staging buffer of "
                             f"{staging.buffer_bytes} bytes; raise the staging size")
        # q/k blocks kept as stored: whole heads read in the file's order (a plain copy, where gathering
        # the permuted rows on the host read at half the speed), un-permuted on the device.
        unpermutes = self._unpermutes(piece, blocks) and not converts and per_block >= piece.head_rows
        head_rows = piece.head_rows if unpermutes else None
        if head_rows:
            per_block -= per_block % head_rows
        for first in range(0, rows, per_block):
            check_cancel()
            count = min(per_block, rows - first)
            t = time.perf_counter()
            index, host, array = staging.acquire()
            t_read = time.perf_counter()
            self._read(piece.read_file_rows if head_rows else piece.read_rows, first, count, array[:count * in_row],
                       readers, self._read_threads)
            self.stats.wait_seconds += t_read - t
            read = time.perf_counter() - t_read
            self.stats.read_seconds += read
            kind = self.stats.reads.setdefault(name.rsplit(".", 2)[-2], [0.0, 0])
            kind[0] += read
            kind[1] += count * in_row
            dst_offset = offset + first * out_row
            if head_rows:
                stream.memcpy_async(scratch, host, count * in_row)
                with stream.torch_stream():
                    heads = (count // head_rows, head_rows // 2, 2, in_row)
                    unpermuted = scratch.as_tensor(torch.uint8, heads).transpose(1, 2)
                    self.buffer.as_tensor(torch.uint8, unpermuted.shape, dst_offset).copy_(unpermuted)
            elif not converts:
                stream.memcpy_async(self.buffer, host, count * in_row, dst_offset=dst_offset)
            else:   # the conversion runs on the device, in stream order after the copy
                stream.memcpy_async(scratch, host, count * in_row)
                with stream.torch_stream():
                    if blocks:
                        stored = dequantize(scratch.as_tensor(torch.uint8, (count, in_row)), None, blocks, decoded)
                        stored = stored.narrow(1, offset_in_row, shape[1])
                    else:
                        stored = scratch.as_tensor(piece.dtype, (count, *shape[1:]))
                    if fmt in CHANNEL_FORMATS:   # quantized per row
                        data, scales = quantize_per_channel(stored, fmt)
                        self.buffer.as_tensor(data.dtype, data.shape, dst_offset).copy_(data)
                        self.buffer.as_tensor(torch.float32, (count,), self.scale_offsets[name] + 4 * first).copy_(scales)
                    else:
                        self.buffer.as_tensor(self.dtype, (count, *shape[1:]), dst_offset).copy_(stored)
            staging.release(index, stream)
            self.stats.stored_bytes += count * in_row
            self.stats.device_bytes += count * out_row
            self.stats.blocks += 1
            on_bytes(count * out_row)

    def _split(self, name: str, stream: Stream, chunk_bytes: int = 64 << 20) -> None:
        """Lay ``name``'s blocks, copied as stored, out in its split-row format, in place on the device
        in stream order after the copies, a chunk of rows at a time (rows are independent)."""
        weight = self.tensors[name]
        data = weight.data
        rows = max(1, chunk_bytes // data.shape[1])
        with stream.torch_stream():
            for first in range(0, data.shape[0], rows):
                part = data[first:first + rows]
                part.copy_(split_rows(part, weight.weight_format, weight.in_features))

    @staticmethod
    def _read(read_rows, first: int, count: int, out: np.ndarray, readers, threads: int) -> None:
        """Rows ``[first, first + count)`` into ``out`` by ``read_rows`` (a slice's), split among the
        reader threads."""
        in_row = out.nbytes // count
        parts = 1 if readers is None else max(1, min(threads, out.nbytes // _MIN_PART_BYTES, count))
        if parts == 1:
            read_rows(first, count, out)
            return
        bounds = [first + count * i // parts for i in range(parts + 1)]
        futures = [readers.submit(read_rows, a, b - a, out[(a - first) * in_row:(b - first) * in_row])
                   for a, b in zip(bounds, bounds[1:])]
        for future in futures:
            future.result()

    def _unpermutes(self, piece: TensorSlice, blocks: str | None) -> bool:
        """Whether ``piece`` is q/k blocks kept as stored whose rows the file holds permuted."""
        return blocks is not None and getattr(piece, "head_rows", None) is not None

    def _converts(self, name: str, piece: TensorSlice, blocks: str | None) -> bool:
        """Whether the stored rows change on the device (dequantization, a dtype change, quantization)."""
        fmt = self.formats.get(name)
        if blocks is not None:
            return source_format(fmt) != blocks
        if fmt is None:
            return piece.dtype != self.dtype
        return fmt in CHANNEL_FORMATS and piece.dtype != CHANNEL_FORMATS[fmt]

    def close(self) -> None:
        self.tensors = {}
        self.buffer.close()


def _scales_of(tensor):
    """What holds a weight's floats: the tensor itself, its channel scales, or its blocks' scales."""
    if not isinstance(tensor, QuantizedWeight):
        return tensor
    if tensor.scales is not None:
        return tensor.scales
    if tensor.weight_format in SPLIT_FORMATS:
        return split_planes(tensor.data, tensor.weight_format, tensor.in_features)[-1]     # its float16 d
    return block_scales(tensor.data, tensor.weight_format)



def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.2f} MB"


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN
