"""The BackendPlugin of a CUDA-like vendor: what each vendor's ``plugin.py`` returns from its hook."""
from __future__ import annotations

from anydev.plugin_api import CONTRACT_VERSION, BackendPlugin

from .spec import VendorSpec


def backend_plugin(spec: VendorSpec) -> BackendPlugin:
    """Declares the backend cheaply; the libraries are loaded only when ``load()`` is called."""

    def load():
        from .runtime import open_runtime

        return open_runtime(spec)

    return BackendPlugin(name=spec.name, contract_version=CONTRACT_VERSION, load=load, description=spec.description)
