"""Weights that may be quantized: the weight type the model holds and its two call sites, the linear
layers and the token embedding's lookup.

A projection's weight is either a float tensor ``[N, K]`` (run by the kernel set's ``linear``) or a
:class:`QuantizedWeight` in one of contract 1.5's formats (run by ``quantized_linear``; the formats and
their byte layouts are :mod:`anydev.plugin_api.weight_formats`'s). The token embedding ``[vocab,
hidden]`` is the same: a float table, or a QuantizedWeight whose rows are looked up by their stored bytes.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from anydev.plugin_api.weight_formats import CHANNEL_FORMATS, check_weight


@dataclasses.dataclass(frozen=True)
class QuantizedWeight:
    """A ``[out_features, in_features]`` linear weight stored in ``weight_format`` on the device:
    ``data`` as the format stores it, ``scales`` float32 ``[out_features]`` for the per-channel
    formats (None for GGUF blocks)."""
    data: torch.Tensor
    scales: torch.Tensor | None
    weight_format: str
    in_features: int

    def __post_init__(self):
        check_weight(self.data, self.scales, self.weight_format, self.in_features)

    @property
    def out_features(self) -> int:
        return self.data.shape[0]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + (self.scales.nbytes if self.scales is not None else 0)

    def rows(self, start: int, stop: int) -> QuantizedWeight:
        """Output rows ``[start, stop)``: a view of the same memory."""
        scales = None if self.scales is None else self.scales[start:stop]
        return QuantizedWeight(self.data[start:stop], scales, self.weight_format, self.in_features)


def linear(kernels, x: torch.Tensor, weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T (+ bias)`` through ``kernels``: ``quantized_linear`` for a
    :class:`QuantizedWeight`, ``linear`` for a float tensor."""
    if isinstance(weight, QuantizedWeight):
        out = kernels.quantized_linear(x, weight.data, weight.scales, weight.weight_format)
    else:
        out = kernels.linear(x, weight)
    return out if bias is None else out + bias


def embedding(kernels, ids: torch.Tensor, table, dtype: torch.dtype) -> torch.Tensor:
    """Rows ``ids`` of the embedding ``table`` as ``[len(ids), hidden]`` in ``dtype``: a float table by
    ``F.embedding``, a :class:`QuantizedWeight` one by ``kernels``' ``quantized_embedding`` (only those
    rows read, dequantized on the device; nothing read on the host, so it runs inside a decode graph)."""
    if not isinstance(table, QuantizedWeight):
        return F.embedding(ids, table)
    return kernels.quantized_embedding(ids, table.data, table.scales, table.weight_format, table.in_features, dtype)


def quantize(weight: torch.Tensor, weight_format: str) -> QuantizedWeight:
    """A float weight quantized per output channel (``int8`` or ``fp8_e4m3``) on its own device."""
    from anydev.plugin_api.weight_formats import quantize_per_channel

    if weight_format not in CHANNEL_FORMATS:
        raise ValueError(f"quantize makes {', '.join(CHANNEL_FORMATS)} weights, not {weight_format!r}")
    data, scales = quantize_per_channel(weight, weight_format)
    return QuantizedWeight(data, scales, weight_format, weight.shape[1])
