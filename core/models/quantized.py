"""Linear layers whose weight may be quantized: the weight type the model holds and its one call site.

A projection's weight is either a float tensor ``[N, K]`` (run by the kernel set's ``linear``) or a
:class:`QuantizedWeight` in one of contract 1.5's formats (run by ``quantized_linear``; the formats and
their byte layouts are :mod:`anydev.plugin_api.weight_formats`'s).
"""
from __future__ import annotations

import dataclasses

import torch

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


def linear(kernels, x: torch.Tensor, weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T (+ bias)`` through ``kernels``: ``quantized_linear`` for a
    :class:`QuantizedWeight`, ``linear`` for a float tensor."""
    if isinstance(weight, QuantizedWeight):
        out = kernels.quantized_linear(x, weight.data, weight.scales, weight.weight_format)
    else:
        out = kernels.linear(x, weight)
    return out if bias is None else out + bias


def quantize(weight: torch.Tensor, weight_format: str) -> QuantizedWeight:
    """A float weight quantized per output channel (``int8`` or ``fp8_e4m3``) on its own device."""
    from anydev.plugin_api.weight_formats import quantize_per_channel

    if weight_format not in CHANNEL_FORMATS:
        raise ValueError(f"quantize makes {', '.join(CHANNEL_FORMATS)} weights, not {weight_format!r}")
    data, scales = quantize_per_channel(weight, weight_format)
    return QuantizedWeight(data, scales, weight_format, weight.shape[1])
