"""Slices of tensors in safetensors files, read by byte range: a rank reads the bytes of its shard and
no others, straight into the caller's (pinned) buffer.

The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON
header giving each tensor's dtype, shape and ``data_offsets`` [begin, end) in the data area, then the
data, row-major. A slice along dimension 0 (or the whole tensor) is one byte range; a slice along
dimension 1 is one range per row. Both are copied out of a read-only memory map of the file (on a warm
page cache that ran at 4.2-4.5 GB/s per thread against 1.4-2.0 GB/s for ``os.preadv`` of the same range,
each in a fresh process, on the development VM).
"""
from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path

import numpy as np
import torch

from .checkpoint_errors import ModelLoadError
from .tensor_slices import sliced_shape

#: F8_E4M3: the weights of an fp8 checkpoint quantized per output channel (see hf_loader's stored_format).
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F8_E4M3": torch.float8_e4m3fn}


class SafetensorsFile:
    """One open safetensors file: its header and a read-only memory map of it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            self.header = json.loads(f.read(header_len))
        self.data_start = 8 + header_len
        with open(self.path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            self._map = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ) if self.size else None
        self._bytes = np.frombuffer(self._map, dtype=np.uint8) if self.size else np.empty(0, np.uint8)

    def entry(self, name: str) -> tuple[torch.dtype, tuple[int, ...], int, int]:
        """(dtype, shape, first byte, end byte) of tensor ``name``; offsets from the start of the file."""
        info = self.header[name]
        if info["dtype"] not in DTYPES:
            raise ModelLoadError(f"{self.path}: tensor '{name}' is {info['dtype']}; weights must be one of "
                                 f"{', '.join(DTYPES)}")
        begin, end = info["data_offsets"]
        return DTYPES[info["dtype"]], tuple(info["shape"]), self.data_start + begin, self.data_start + end

    def close(self) -> None:
        """Drop the map (unmapped once no array made from it is left)."""
        self._bytes = self._map = None


def read_spans(source: SafetensorsFile, out: np.ndarray, offset: int, rows: int, length: int, stride: int) -> None:
    """Copy ``rows`` spans of ``length`` bytes, ``stride`` bytes apart from ``offset`` in ``source``,
    one after another into the uint8 array ``out``. Every byte a rank reads passes through here."""
    end = offset + (rows - 1) * stride + length
    if end > source.size:
        raise ModelLoadError(f"{source.path}: file ends at byte {source.size}, inside a tensor (truncated?)")
    if rows == 1 or stride == length:
        np.copyto(out[:rows * length], source._bytes[offset:offset + rows * length])
        return
    spans = np.lib.stride_tricks.as_strided(source._bytes[offset:end], shape=(rows, length), strides=(stride, 1),
                                            writeable=False)
    np.copyto(out[:rows * length].reshape(rows, length), spans)


class SafetensorsSlice:
    """The slice ``cut`` of tensor ``name`` in ``source`` (see :mod:`anydev.core.loading.tensor_slices`)."""

    def __init__(self, source: SafetensorsFile, name: str, cut):
        self.dtype, self.full_shape, begin, end = source.entry(name)
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        if end - begin != _numel(self.full_shape) * itemsize:
            raise ModelLoadError(f"{source.path}: tensor '{name}' has {end - begin} bytes for shape {self.full_shape}")
        self.shape = sliced_shape(self.full_shape, cut)
        self._source = source
        full_row = _numel(self.full_shape[1:]) * itemsize
        self._stride = full_row
        if cut is None or cut[0] == 0:     # whole rows: one contiguous range
            first_row = 0 if cut is None else cut[1]
            self._start, self._length = begin + first_row * full_row, full_row
        elif cut[0] == 1 and len(self.full_shape) >= 2:   # part of every row
            inner = _numel(self.full_shape[2:]) * itemsize
            self._start, self._length = begin + cut[1] * inner, cut[2] * inner
        else:
            raise ValueError(f"cannot slice '{name}' {self.full_shape} along dimension {cut[0]}")

    def read_rows(self, first: int, count: int, out: np.ndarray) -> None:
        if self._length == self._stride:
            read_spans(self._source, out, self._start + first * self._stride, 1, count * self._length, count * self._length)
        else:
            read_spans(self._source, out, self._start + first * self._stride, count, self._length, self._stride)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
