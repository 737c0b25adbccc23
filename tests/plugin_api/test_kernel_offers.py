"""Kernel offers (contract 1.6; moe_linear 1.7): a backend's kernel for some dtypes and weight formats runs on exactly
those, the reference (or the fused composition) on the rest, on the same tensors; bad declarations
are refused naming the backend and the kernel."""
from __future__ import annotations

import pytest
import torch

from anydev.plugin_api import CONTRACT_VERSION, KernelOffer, PluginError
from anydev.plugin_api import kernels as K
from anydev.plugin_api import weight_formats as W


def _weight(weight_format: str, N: int = 8, K_: int = 256):
    gen = torch.Generator().manual_seed(0)
    if weight_format in W.CHANNEL_FORMATS:
        return W.quantize_per_channel(torch.randn(N, K_, generator=gen), weight_format)
    block = W.BLOCK_FORMATS[weight_format]
    blocks = torch.randint(0, 256, (N, K_ // block.elems, block.bytes), generator=gen, dtype=torch.uint8)
    blocks[:, :, 0:2] = torch.tensor([0.01], dtype=torch.float16).view(torch.uint8)   # a sane scale field
    return blocks.view(N, -1).contiguous(), None


def wrong_off_q4_k(calls):
    """A quantized_linear right on q4_k and wrong (zeros) on every other format, recording its calls."""

    def quantized_linear(x, weight, scales, weight_format):
        calls.append(weight_format)
        out = K.quantized_linear(x, weight, scales, weight_format)
        return out if weight_format == "q4_k" else torch.zeros_like(out)

    return quantized_linear


def test_a_q4_k_offer_runs_on_q4_k_and_the_reference_on_the_undeclared_formats():
    calls = []
    kernels = K.KernelSet("vendor", {"quantized_linear": KernelOffer(wrong_off_q4_k(calls), weight_formats=("q4_k",))})
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(1))
    for weight_format in ("q4_k", "q8_0", "int8"):
        weight, scales = _weight(weight_format)
        got = kernels.quantized_linear(x, weight, scales, weight_format)
        assert torch.equal(got, K.quantized_linear(x, weight, scales, weight_format)), weight_format
    assert calls == ["q4_k"]                       # q8_0 and int8 never reached the vendor's kernel
    assert kernels.native == {"quantized_linear"}
    assert kernels.supports("quantized_linear", torch.float16, "q4_k")
    assert kernels.supports("quantized_linear", "bfloat16") and kernels.supports("quantized_linear")
    assert not kernels.supports("quantized_linear", torch.float32, "q8_0")
    assert not kernels.supports("rms_norm")
    assert "quantized_linear [q4_k]" in kernels.describe()


def test_a_dtype_offer_runs_on_its_dtypes_and_keyword_arguments_choose_too():
    calls = []

    def rms_norm(x, weight, eps):
        calls.append(x.dtype)
        return K.rms_norm(x, weight, eps)

    kernels = K.KernelSet("vendor", {"rms_norm": KernelOffer(rms_norm, dtypes=("float16",))})
    for dtype in (torch.float16, torch.float32, torch.bfloat16):
        x = torch.randn(2, 16).to(dtype)
        kernels.rms_norm(x, torch.ones(16, dtype=dtype), 1e-5)
        kernels.rms_norm(x=x, weight=torch.ones(16, dtype=dtype), eps=1e-5)
    assert calls == [torch.float16, torch.float16]
    assert "rms_norm [float16]" in kernels.describe()


def test_a_moe_linear_offer_of_one_format_takes_the_float_weight_and_not_the_other_formats():
    """moe_linear (1.7) offered for q8_0 only: the vendor's kernel on q8_0 and on a float weight
    (``weight_format=None``), the reference on q4_k."""
    calls = []

    def moe_linear(x, weight, scales, weight_format, expert_ids):
        calls.append(weight_format)
        return K.moe_linear(x, weight, scales, weight_format, expert_ids)

    kernels = K.KernelSet("vendor", {"moe_linear": KernelOffer(moe_linear, weight_formats=("q8_0",))})
    x, ids = torch.randn(3, 256), torch.tensor([1, 0, 1])
    for weight_format in ("q8_0", "q4_k"):
        weight = torch.stack([_weight(weight_format)[0], _weight(weight_format)[0]])
        kernels.moe_linear(x, weight, None, weight_format, ids)
    kernels.moe_linear(x, torch.randn(2, 8, 256), None, None, ids)
    assert calls == ["q8_0", None]
    assert kernels.supports("moe_linear", torch.float32) and not kernels.supports("moe_linear", None, "q4_k")
    assert "moe_linear [q8_0]" in kernels.describe()


def test_a_fused_kernel_offered_for_some_dtypes_is_composed_of_the_sets_parts_elsewhere():
    calls = []
    offered = {
        "rotary_write_kv": KernelOffer(lambda *a: calls.append("fused"), dtypes=("bfloat16",)),
        "rotary_embedding": lambda positions, q, k, cache: calls.append("rotary"),
        "write_kv": lambda key, value, kc, vc, slots: calls.append("write"),
    }
    kernels = K.KernelSet("vendor", offered)
    for dtype in (torch.bfloat16, torch.float16):
        q = torch.zeros(1, 1, 4, dtype=dtype)
        kernels.rotary_write_kv(None, q, q, q, None, None, None, None)
    assert calls == ["fused", "rotary", "write"]


def test_a_split_row_format_is_taken_only_by_an_offer_that_names_it():
    """A kernel written before contract 1.11 (a bare callable, or an offer of every format) never
    gets a q8_0_split weight: the reference reads it; an offer naming it takes it."""
    calls = []

    def quantized_linear(x, weight, scales, weight_format):
        calls.append(weight_format)
        return K.quantized_linear(x, weight, scales, weight_format)

    blocks, _ = _weight("q8_0")
    split = W.split_rows(blocks, "q8_0_split", 256)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(2))
    for offered in (quantized_linear, KernelOffer(quantized_linear)):
        kernels = K.KernelSet("vendor", {"quantized_linear": offered})
        assert not kernels.supports("quantized_linear", torch.bfloat16, "q8_0_split")
        assert kernels.supports("quantized_linear", torch.bfloat16, "q8_0")
        assert torch.equal(kernels.quantized_linear(x, split, None, "q8_0_split"), K.quantized_linear(x, blocks, None, "q8_0"))
    assert calls == []
    named = K.KernelSet("vendor", {"quantized_linear": KernelOffer(quantized_linear, weight_formats=W.WEIGHT_FORMATS)})
    assert named.supports("quantized_linear", torch.bfloat16, "q8_0_split") and named.quantized_linear is quantized_linear
    named.quantized_linear(x, split, None, "q8_0_split")
    assert calls == ["q8_0_split"]


def test_an_offer_of_every_input_is_the_vendors_callable_itself():
    def linear(x, weight):
        return x @ weight.T

    kernels = K.KernelSet("vendor", {"linear": KernelOffer(linear), "silu_and_mul": K.silu_and_mul})
    assert kernels.linear is linear and kernels.offers["linear"].dtypes == ("float32", "float16", "bfloat16")


@pytest.mark.parametrize("offer, message", [
    (KernelOffer(K.quantized_linear, weight_formats=("q5_k",)), r"vendor.*quantized_linear.*unknown weight_formats 'q5_k'"),
    (KernelOffer(K.quantized_linear, weight_formats=()), r"quantized_linear declares no weight_formats"),
    (KernelOffer(K.quantized_linear, weight_formats="q4_k"), r"must be a tuple of names"),
    (KernelOffer(K.quantized_linear, dtypes=("float64",)), r"unknown dtypes 'float64'"),
    (KernelOffer("not a function"), r"quantized_linear is not callable"),
])
def test_bad_offers_are_refused_naming_the_backend_and_the_kernel(offer, message):
    with pytest.raises(PluginError, match=message):
        K.KernelSet("vendor", {"quantized_linear": offer})


def test_weight_formats_on_a_kernel_without_one_are_refused():
    with pytest.raises(PluginError, match=r"rms_norm takes no weight format"):
        K.KernelSet("vendor", {"rms_norm": KernelOffer(K.rms_norm, weight_formats=("q4_k",))})


def test_the_registry_has_one_entry_per_kernel_whose_arguments_exist():
    """Each KernelSpec names arguments of its reference (the dispatch reads them) and a version."""
    import inspect

    for name, spec in K.KERNELS.items():
        parameters = inspect.signature(spec.reference).parameters
        assert spec.name == name and spec.reference.__name__ == name
        assert spec.dtype_arg in parameters, name
        assert (spec.format_arg in parameters) if spec.format_arg else not spec.weight_formats, name
        assert (1, 2) <= spec.since <= CONTRACT_VERSION, name
        # a part may be fused itself when the registry lists it first (the KernelSet composes in order)
        assert all(part in K.KERNEL_NAMES[:K.KERNEL_NAMES.index(name)] for part in spec.fused), name
    assert K.KERNELS["quantized_linear"].weight_formats == W.WEIGHT_FORMATS
