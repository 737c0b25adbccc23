"""Triton implementations of the contract's kernels (1.2-1.10) (:mod:`anydev.plugin_api.kernels`), shared by every
backend whose torch ships Triton: nvidia; moore and metax when their vendor Triton is importable; the
cpu backend under Triton's interpreter (``ANYDEV_CPU_TRITON=1`` with ``TRITON_INTERPRET=1``), which is
how CI checks them. One module per kernel family; each public function has exactly the signature and
semantics of the reference of the same name.
"""
from __future__ import annotations

from typing import Callable, Mapping

from anydev.plugin_api.kernel_offers import ACTIVATION_DTYPES, KernelOffer
from anydev.plugin_api.weight_formats import SPLIT_FORMATS, WEIGHT_FORMATS


def triton_importable() -> bool:
    """True when ``import triton`` works (without importing it twice)."""
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def kernels() -> Mapping[str, Callable | KernelOffer]:
    """Every kernel of the contract (:data:`~anydev.plugin_api.kernels.KERNEL_NAMES`), by name;
    ``quantized_linear`` and the mixture-of-experts kernels (1.7) as :class:`KernelOffer` entries naming
    what they take: every activation dtype, every weight format (``moe_linear`` also the float weight;
    the split-row ``q8_0_split`` for ``quantized_linear`` only, where its GEMV reads it at the int8
    GEMV's speed). Imports Triton (raises ImportError without it)."""
    from .activation import silu_and_mul
    from .attention_decode import paged_decode_attention
    from .attention_prefill import paged_prefill_attention
    from .cache import write_kv
    from .embedding import quantized_embedding
    from .linear import linear, quantized_linear
    from .logprobs import logprobs
    from .moe import moe_combine, moe_linear, moe_route
    from .norm import fused_add_rms_norm, rms_norm
    from .rotary import qk_norm_rotary_write_kv, rotary_embedding, rotary_write_kv

    return {
        "write_kv": write_kv,
        "paged_decode_attention": paged_decode_attention,
        "paged_prefill_attention": paged_prefill_attention,
        "rms_norm": rms_norm,
        "fused_add_rms_norm": fused_add_rms_norm,
        "rotary_embedding": rotary_embedding,
        "silu_and_mul": silu_and_mul,
        "rotary_write_kv": rotary_write_kv,
        "qk_norm_rotary_write_kv": qk_norm_rotary_write_kv,
        "linear": linear,
        "quantized_linear": KernelOffer(quantized_linear, dtypes=ACTIVATION_DTYPES, weight_formats=WEIGHT_FORMATS),
        "quantized_embedding": quantized_embedding,
        "moe_route": KernelOffer(moe_route, dtypes=ACTIVATION_DTYPES),
        "moe_linear": KernelOffer(moe_linear, dtypes=ACTIVATION_DTYPES,
                                  weight_formats=tuple(f for f in WEIGHT_FORMATS if f not in SPLIT_FORMATS)),
        "moe_combine": moe_combine,
        "logprobs": logprobs,
    }
