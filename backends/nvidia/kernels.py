"""The nvidia backend's own kernels over the shared Triton ones (``VendorSpec.own_kernels``): its
batch-1 GEMVs in CUDA C (``gemv/``) inside ``quantized_linear``, the Triton kernel for every other call."""
from __future__ import annotations

import dataclasses
from typing import Mapping

NOTE = "its own batch-1 q4_k / q8_0_split / q6_k_split / q4_0 / q4_1 GEMVs in CUDA C"


def own_kernels(triton: Mapping) -> dict:
    from .gemv.kernel import with_gemvs

    offer = triton["quantized_linear"]
    return {**triton, "quantized_linear": dataclasses.replace(offer, kernel=with_gemvs(offer.kernel))}
