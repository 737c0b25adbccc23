"""A sparse MoE block on one rank (Qwen3-MoE's): the router, the experts' stacked weights and their
grouped projections through the contract's ``moe_route``, ``moe_linear`` and ``moe_combine`` kernels.

Per token: ``moe_route`` picks ``top_k`` experts and their weights from the router's logits; the
token's row is repeated once per chosen expert, each copy goes through its expert's gate/up
(``moe_linear``), ``silu_and_mul`` and down (``moe_linear``), and the copies are summed with the
weights (``moe_combine``, in float32). Under TP every rank holds every expert's slice of the
intermediate dimension (gate/up rows, down columns), so the sum is a partial one, all-reduced by the
caller like a dense MLP's.
Nothing reads the host and every shape follows ``T``: the block runs inside decode graphs.
"""
from __future__ import annotations

import dataclasses

import torch

from .quantized import QuantizedWeight


@dataclasses.dataclass(frozen=True)
class ExpertWeights:
    """``E`` experts' weights of one projection stacked as ``moe_linear`` takes them: ``data`` ``[E, N,
    ...]``, ``scales`` ``[E, N]`` (per-channel formats) or None, ``weight_format`` None for floats."""
    data: torch.Tensor
    scales: torch.Tensor | None
    weight_format: str | None

    @classmethod
    def of(cls, stacked, experts: int) -> "ExpertWeights":
        """From one tensor (or QuantizedWeight) of ``experts * N`` rows: views, no copy."""
        if isinstance(stacked, QuantizedWeight):
            scales = None if stacked.scales is None else stacked.scales.view(experts, -1)
            return cls(stacked.data.view(experts, -1, stacked.data.shape[-1]), scales, stacked.weight_format)
        return cls(stacked.view(experts, -1, stacked.shape[-1]), None, None)

    @property
    def experts(self) -> int:
        return self.data.shape[0]


def expert_weights(weights: dict, fused: str, parts: list[str], experts: int) -> ExpertWeights:
    """``fused``'s view when the loader laid its ``parts`` (row blocks, expert by expert) back to back
    (see :mod:`.fusion`), else one stacked copy of the parts."""
    view = weights.get(fused)
    if view is None:
        tensors = [weights[name] for name in parts]
        first = tensors[0]
        if isinstance(first, QuantizedWeight):
            scales = None if first.scales is None else torch.cat([t.scales for t in tensors])
            view = QuantizedWeight(torch.cat([t.data for t in tensors]), scales, first.weight_format,
                                   first.in_features)
        else:
            view = torch.cat(tensors)
    return ExpertWeights.of(view, experts)


def sparse_moe(kernels, x: torch.Tensor, router: torch.Tensor, gate_up: ExpertWeights, down: ExpertWeights,
               top_k: int, renormalize: bool) -> torch.Tensor:
    """The MoE block of ``x`` ``[T, hidden]``: ``[T, hidden]`` (a partial sum on a TP rank)."""
    T = x.shape[0]
    logits = kernels.linear(x, router)                                   # [T, E], replicated router
    weights, expert_ids = kernels.moe_route(logits, top_k, renormalize)   # [T, top_k]
    ids = expert_ids.reshape(-1)
    # token t's copies are rows t*k ..; expand + reshape: a copy whose size needs no host read
    rows = x[:, None, :].expand(T, top_k, x.shape[1]).reshape(T * top_k, x.shape[1])
    hidden = kernels.silu_and_mul(kernels.moe_linear(rows, gate_up.data, gate_up.scales, gate_up.weight_format, ids))
    out = kernels.moe_linear(hidden, down.data, down.scales, down.weight_format, ids)   # [T * top_k, hidden]
    return kernels.moe_combine(out, weights)
