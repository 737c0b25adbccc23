"""Runtime variants: :class:`~.runtime.CudaLikeRuntime` subclasses for libraries that present a
vendor's runtime API but are not the vendor's runtime (anydev's emulated runtimes, for one), each
registered by the package that ships it; the cudalike runtime itself knows none of them.

A variant is a CudaLikeRuntime subclass with a classmethod ``claims(library) -> str | None``: what the
loaded library is when the variant is made for it (e.g. "an emulated runtime (...)"), else None.
:func:`~.plugin.open_runtime` builds the variant that claims the library, the vendor's runtime
otherwise. A package registers its variant when imported (:func:`register_variant`); a process that
was only given the library's variables imports the modules ``$ANYDEV_CUDALIKE_VARIANTS`` names
(comma-separated), which the package hands out with them.
"""
from __future__ import annotations

import importlib
import os

from anydev.plugin_api.errors import BackendUnavailableError

VARIANT_MODULES_ENV = "ANYDEV_CUDALIKE_VARIANTS"

_variants: list[type] = []


def register_variant(runtime_class: type) -> None:
    """Build ``runtime_class`` for every library its ``claims`` accepts (once per class)."""
    if not callable(getattr(runtime_class, "claims", None)):
        raise TypeError(f"a runtime variant needs a classmethod claims(library), {runtime_class!r} has none")
    if runtime_class not in _variants:
        _variants.append(runtime_class)


def variant_for(library, backend: str) -> tuple[type, str] | None:
    """The registered variant that claims ``library`` (a loaded runtime library of backend
    ``backend``) and what it says the library is; None for a vendor's own library."""
    for module in filter(None, (m.strip() for m in os.environ.get(VARIANT_MODULES_ENV, "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise BackendUnavailableError(backend, f"${VARIANT_MODULES_ENV} names {module!r}, which cannot be imported "
                                                   f"({exc}); unset it or install the package") from exc
    for variant in _variants:
        description = variant.claims(library)
        if description:
            return variant, description
    return None
