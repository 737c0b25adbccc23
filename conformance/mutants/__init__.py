"""Mutation testing of the conformance suite: deliberately broken backends that it must fail.

Each mutant is a small subclass of the cpu backend's runtime that breaks exactly one thing; its
docstring names the fault. ``python -m anydev.conformance.mutants`` runs the suite on every mutant
(each on the check groups relevant to it, in parallel processes) and prints which check caught each
one, then ``mutants caught: N/N``; a mutant that survives makes it exit non-zero.

Adding a mutant is one entry: a class decorated with :func:`mutant` in any module of this package
(modules are found by name; add a module for a new area)::

    @mutant("memset-noop", checks=["test_memory.py"])
    class MemsetDoesNothing(CpuRuntime):
        \"\"\"memset_async validates its arguments and then does nothing.\"\"\"
        def memset_async(self, ptr, value, nbytes, stream):
            super().memset_async(ptr, value, 0, stream)

``checks`` are the suite's test modules or node ids (``test_x.py::test_name``) to run it on. The
runner runs the kernels group's quick sweep (``--quick``: every older kernel mutant is caught there);
``full_sweep=True`` runs the full one, for a fault only the engine's real shapes show.
Modules outside this package (a vendor's own mutants) are loaded from ``$ANYDEV_MUTANT_MODULES``
(comma-separated import names) or the runner's ``--modules``.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass

from anydev.plugin_api import CONTRACT_VERSION, BackendPlugin, get_registry, hookimpl

MODULES_ENV = "ANYDEV_MUTANT_MODULES"
#: Backend names of mutants are this prefix and the mutant's name.
PREFIX = "mutant-"


@dataclass(frozen=True)
class Mutant:
    """One deliberately broken backend: its name, runtime class, the checks to run and the fault."""

    name: str
    runtime: type
    checks: tuple[str, ...]
    fault: str
    full_sweep: bool = False  # run the kernels group's full sweep, not --quick

    @property
    def backend_name(self) -> str:
        return PREFIX + self.name


_registered: dict[str, Mutant] = {}


def mutant(name: str, checks, full_sweep: bool = False):
    """Class decorator: register ``cls`` (a DeviceRuntime subclass) as the mutant ``name``, run on
    ``checks`` (with the kernels group's full sweep when ``full_sweep``, else ``--quick``)."""

    def register(cls: type) -> type:
        if name in _registered and _registered[name].runtime is not cls:
            raise ValueError(f"two mutants are named {name!r}: {_registered[name].runtime.__qualname__} and {cls.__qualname__}")
        if not (cls.__doc__ or "").strip():
            raise ValueError(f"mutant {name!r} ({cls.__qualname__}) needs a docstring naming its fault")
        cls.name = PREFIX + name
        cls.hardware_label = f"cpu backend with one fault ({name})"
        _registered[name] = Mutant(name, cls, tuple(checks), " ".join(cls.__doc__.split()), full_sweep)
        return cls

    return register


def all_mutants(extra_modules=()) -> dict[str, Mutant]:
    """Every mutant: this package's modules, ``$ANYDEV_MUTANT_MODULES`` and ``extra_modules``."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    names = [m.strip() for m in os.environ.get(MODULES_ENV, "").split(",") if m.strip()]
    for module in [*names, *extra_modules]:
        importlib.import_module(module)
    return dict(sorted(_registered.items()))


class _MutantPlugin:
    """A plugin object declaring one mutant as a backend."""

    def __init__(self, m: Mutant):
        self.mutant = m

    @hookimpl
    def anydev_backends(self):
        return [BackendPlugin(name=self.mutant.backend_name, contract_version=CONTRACT_VERSION,
                              load=self.mutant.runtime, description=f"mutant: {self.mutant.fault}")]


def register_backends(names) -> list[str]:
    """Add the mutants ``names`` to this process's backend registry; return their backend names."""
    known = all_mutants()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(known)}")
    registry = get_registry()
    out = []
    for name in names:
        m = known[name]
        if m.backend_name not in registry.plugins:
            registry.add(_MutantPlugin(m), f"mutant {name}")
        out.append(m.backend_name)
    return out
