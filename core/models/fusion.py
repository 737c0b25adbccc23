"""Fused projections without copies: q/k/v (and gate/up) of a layer sit one after another in the
rank's weight buffer, so one view spans them and one matmul replaces three (two). Quantized parts
(:class:`.quantized.QuantizedWeight`) fuse the same way when they share a format: their stored rows
are back to back, and so are their per-channel scales."""
from __future__ import annotations

import torch

from .quantized import QuantizedWeight

#: fused name -> the HF names it spans, in buffer order (that order is the split order).
FUSIONS = {
    "self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "self_attn.qkv_proj.bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
}


def fused_views(weights, layers, fusions=None) -> dict[str, torch.Tensor | QuantizedWeight]:
    """Views of ``weights`` (a :class:`~anydev.core.loading.weights.RankWeights`) over each fusable group
    (:data:`FUSIONS`, or ``fusions(config, i)``'s groups of layer i: a family's, see
    :meth:`~.family.ModelFamily.fusions`):
    ``model.layers.{i}.<fused name>`` -> [sum of rows, cols] (a QuantizedWeight of that many rows for
    quantized parts). A group whose parts are missing, of different formats, or not back to back in
    the buffer (alignment padding between them) is left out; the model then runs the parts one by one."""
    views = {}
    for i in (range(layers) if isinstance(layers, int) else layers):   # a layer count, or the layer indices
        groups = FUSIONS if fusions is None else fusions(weights.config, i)
        for fused, parts in groups.items():
            names = [f"model.layers.{i}.{part}" for part in parts]
            view = _span(weights, names)
            if view is not None:
                views[f"model.layers.{i}.{fused}"] = view
    return views


def _span(weights, names: list[str]):
    if any(name not in weights.offsets for name in names):
        return None
    shapes = [weights.offsets[name][1] for name in names]
    formats = {weights.formats.get(name) for name in names}
    if len({shape[1:] for shape in shapes}) != 1 or len(formats) != 1:
        return None
    rows = sum(shape[0] for shape in shapes)
    row_bytes = weights.row_bytes(names[0], shapes[0])
    if not _back_to_back([weights.offsets[name][0] for name in names], [s[0] * row_bytes for s in shapes]):
        return None
    offset, first = weights.offsets[names[0]][0], weights.tensors[names[0]]
    if not isinstance(first, QuantizedWeight):
        return weights.buffer.as_tensor(weights.dtype, (rows, *shapes[0][1:]), offset)
    data = weights.buffer.as_tensor(first.data.dtype, (rows, first.data.shape[1]), offset)
    scales = None
    if first.scales is not None:
        scale_offsets = [weights.scale_offsets[name] for name in names]
        if not _back_to_back(scale_offsets, [4 * s[0] for s in shapes]):
            return None
        scales = weights.buffer.as_tensor(torch.float32, (rows,), scale_offsets[0])
    return QuantizedWeight(data, scales, first.weight_format, first.in_features)


def _back_to_back(offsets: list[int], sizes: list[int]) -> bool:
    return all(offsets[k] + sizes[k] == offsets[k + 1] for k in range(len(offsets) - 1))
