"""Fused projections without copies: q/k/v (and gate/up) of a layer sit one after another in the
rank's weight buffer, so one view spans them and one matmul replaces three (two)."""
from __future__ import annotations

import torch

#: fused name -> the HF names it spans, in buffer order (that order is the split order).
FUSIONS = {
    "self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "self_attn.qkv_proj.bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
}


def fused_views(weights, layers) -> dict[str, torch.Tensor]:
    """Views of ``weights`` (a :class:`~anydev.core.loading.weights.RankWeights`) over each fusable group:
    ``model.layers.{i}.<fused name>`` -> [sum of rows, cols]. A group whose parts are missing or not
    back to back in the buffer (alignment padding between them) is left out; the model then runs the
    parts one by one."""
    itemsize = torch.empty((), dtype=weights.dtype).element_size()
    views = {}
    for i in (range(layers) if isinstance(layers, int) else layers):   # a layer count, or the layer indices
        for fused, parts in FUSIONS.items():
            spans = [weights.offsets.get(f"model.layers.{i}.{part}") for part in parts]
            if None in spans or len({shape[1:] for _, shape in spans}) != 1:
                continue
            offset, end, rows = spans[0][0], spans[0][0], 0
            for part_offset, shape in spans:
                if part_offset != end:
                    break
                end += _numel(shape) * itemsize
                rows += shape[0]
            else:
                views[f"model.layers.{i}.{fused}"] = weights.buffer.as_tensor(
                    weights.dtype, (rows, *spans[0][1][1:]), offset)
    return views


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
