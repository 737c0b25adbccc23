"""The BackendPlugin of a CUDA-like vendor: what each vendor's ``plugin.py`` returns from its hook."""
from __future__ import annotations

from anydev.plugin_api import CONTRACT_VERSION, BackendPlugin

from .spec import VendorSpec


def backend_plugin(spec: VendorSpec) -> BackendPlugin:
    """Declares the backend cheaply; the libraries are loaded only when ``load()`` is called."""

    def load():
        return open_runtime(spec)

    return BackendPlugin(name=spec.name, contract_version=CONTRACT_VERSION, load=load, description=spec.description)


def open_runtime(spec: VendorSpec) -> "CudaLikeRuntime":
    """Load ``spec``'s runtime library and build its runtime: a :class:`CudaLikeRuntime`, or the
    registered runtime variant that claims the library (:mod:`.variants`: e.g. anydev's emulated
    runtimes, which register theirs)."""
    from .library import load_library
    from .runtime import CudaLikeRuntime, ffi_for
    from .variants import variant_for

    library = load_library(ffi_for(spec.rt, spec.ccl), spec.runtime_library, spec.name, spec.sdk_roots,
                           spec.lib_subdirs)
    claim = variant_for(library, spec.name)
    runtime_class = claim[0] if claim is not None else CudaLikeRuntime
    return runtime_class(spec, library)
