"""Which kernels the model calls: the backend's own (contract 1.2's optional ``kernels``), the same with
every fused kernel run as its parts, or the contract's torch references (:mod:`anydev.plugin_api.kernels`),
chosen by ``EngineConfig.kernels``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import EngineConfigError

if TYPE_CHECKING:
    from anydev.plugin_api.kernels import KernelSet

KERNEL_MODES = ("native", "unfused", "reference")


def select_kernels(backend, mode: str) -> KernelSet:
    """"native": the backend's kernels where it offers them, the references elsewhere: per kernel,
    and for a kernel offered for some dtypes or weight formats only (a ``KernelOffer``, contract
    1.6) per call, as ``KernelSet.supports(name, dtype, weight_format)`` answers; the reference runs
    on the same tensors, so on the same device. "unfused": as "native", but every fused kernel
    (``FUSED``) as the composition of its parts even where the backend offers it (to measure what a
    fusion saves, and to compare tokens with and without it). "reference": every kernel from the
    references (to compare greedy tokens with and without the backend's kernels). ``describe()`` of
    the result is the engine's start-up line."""
    if mode not in KERNEL_MODES:
        raise EngineConfigError(f"kernels must be one of {KERNEL_MODES}, got {mode!r}")
    from anydev.plugin_api.kernel_offers import KernelOffer   # (torch: imported here, where kernels are chosen)
    from anydev.plugin_api.kernels import FUSED, KernelSet

    if mode == "reference":
        return KernelSet.reference(backend.name)
    kernels = backend.kernels()
    if mode == "unfused":
        # each offer as declared again: a kernel without weight formats declares None, not ()
        offers = {name: KernelOffer(offer.kernel, offer.dtypes, offer.weight_formats or None)
                  for name, offer in kernels.offers.items() if name not in FUSED}
        return KernelSet(kernels.backend, offers, kernels.note)
    return kernels
