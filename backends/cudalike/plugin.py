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
    """Load ``spec``'s runtime library and build its runtime: a :class:`CudaLikeRuntime`, or, only
    when the library reports itself as anydev's emulated runtime, an ``EmulatedRuntime`` (the same
    bindings, with a torch bridge onto CPU tensors, since its device memory is host memory)."""
    from .emulated import EmulatedRuntime   # a subclass of the runtime; chosen only for anydev's emulated libraries
    from .library import load_library
    from .runtime import EMULATION_MARKER, CudaLikeRuntime, bind_optional, ffi_for

    library = load_library(ffi_for(spec.rt, spec.ccl), spec.runtime_library, spec.name, spec.sdk_roots,
                           spec.lib_subdirs)
    if bind_optional(library, EMULATION_MARKER) is not None:
        return EmulatedRuntime(spec, library)
    return CudaLikeRuntime(spec, library)
