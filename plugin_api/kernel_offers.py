"""What a backend's native kernel takes (contract 1.6): the capability declaration of each offer.

A backend offers a kernel in :meth:`DeviceRuntime.kernels` either as a bare callable (it takes every
input its torch reference takes, the meaning since contract 1.2) or as a :class:`KernelOffer` naming
the activation dtypes and, for a kernel with a weight format (``quantized_linear``, ``moe_linear``), the weight
formats it takes. For every other input the engine runs the torch reference, on the same device
(``KernelSet.supports`` answers which). Torch-free, so a plugin module can import it cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .errors import PluginError

#: The activation dtypes of every kernel (by name, as in ``torch.float16``).
ACTIVATION_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of the contract, for the kernels registry (``anydev.plugin_api.kernels.KERNELS``).

    ``reference`` is the torch reference (its docstring is the spec); ``since`` the contract version
    that added the kernel. ``dtype_arg`` names the argument whose dtype (or which, where it is a
    ``torch.dtype``) is the kernel's activation dtype; ``format_arg`` the argument naming the weight
    format, for a kernel that takes one of ``weight_formats``; ``named_formats``: those of them an
    offer takes only where it names them (the split rows of contracts 1.11 and 1.12: a kernel written before them
    does not read them). ``fused``: the kernels a fused kernel stands for, in the order its reference
    calls them (a backend that does not offer it gets their composition)."""

    name: str
    reference: Callable
    since: tuple[int, int]
    dtype_arg: str
    format_arg: str | None = None
    weight_formats: tuple[str, ...] = ()
    named_formats: tuple[str, ...] = ()
    fused: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelOffer:
    """A native kernel for some inputs only (contract 1.6), as a value of ``DeviceRuntime.kernels()``::

        {"quantized_linear": KernelOffer(my_q4_k_gemm, weight_formats=("q4_k",), dtypes=("float16",))}

    ``dtypes``: the activation dtypes it takes (names from :data:`ACTIVATION_DTYPES`); None: all of
    them. ``weight_formats``: for a kernel with a weight format, the formats it takes (names from
    ``anydev.plugin_api.weight_formats.WEIGHT_FORMATS``); None: all of them but the spec's
    ``named_formats``, which an offer takes only by naming them. (``moe_linear``'s float
    weight, ``weight_format=None``, is taken for every declared dtype.) The kernel is called
    only on inputs it declares; the conformance suite checks exactly those and reports the rest as
    not offered."""

    kernel: Callable
    dtypes: tuple[str, ...] | None = None
    weight_formats: tuple[str, ...] | None = None

    def takes(self, dtype: str, weight_format: str | None = None) -> bool:
        """True when this (resolved) offer takes activations of ``dtype`` and ``weight_format``."""
        return dtype in self.dtypes and (weight_format is None or weight_format in self.weight_formats)

    def covers(self, spec: KernelSpec) -> bool:
        """True when this (resolved) offer takes every input of ``spec``'s reference."""
        return set(self.dtypes) == set(ACTIVATION_DTYPES) and set(self.weight_formats) == set(spec.weight_formats)


def resolve_offer(backend: str, spec: KernelSpec, offered) -> KernelOffer:
    """``offered`` (a callable or a :class:`KernelOffer`) as a KernelOffer with both axes spelled
    out; :class:`PluginError` naming the backend and the kernel when the declaration is not valid."""
    offer = offered if isinstance(offered, KernelOffer) else KernelOffer(offered)
    where = f"backend '{backend}': kernel {spec.name}"
    if not callable(offer.kernel):
        raise PluginError(f"{where} is not callable ({offer.kernel!r})")
    dtypes = _names(where, "dtypes", offer.dtypes, ACTIVATION_DTYPES)
    if offer.weight_formats is not None and not spec.weight_formats:
        raise PluginError(f"{where} takes no weight format; remove weight_formats from its KernelOffer")
    formats = _names(where, "weight_formats", offer.weight_formats, spec.weight_formats) if spec.weight_formats else ()
    if offer.weight_formats is None:
        formats = tuple(name for name in formats if name not in spec.named_formats)
    return KernelOffer(offer.kernel, dtypes, formats)


def _names(where: str, axis: str, declared, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if declared is None:
        return allowed
    if isinstance(declared, str):
        raise PluginError(f"{where}: {axis} must be a tuple of names, got the string {declared!r}")
    declared = tuple(declared)
    unknown = [name for name in declared if name not in allowed]
    if unknown:
        raise PluginError(f"{where} declares unknown {axis} {', '.join(map(repr, unknown))}; the contract's are "
                          f"{', '.join(allowed)}")
    if not declared:
        raise PluginError(f"{where} declares no {axis}: leave the kernel out of kernels() instead")
    return tuple(name for name in allowed if name in declared)
