"""The model registry: every family the engine runs, by name, built in or from other packages.

Built-in families are the modules of :data:`BUILTIN_FAMILIES` (each exposes ``FAMILY``, a
:class:`~.family.ModelFamily`). Other packages add families through the entry-point group
:data:`ENTRY_POINT_GROUP`, one entry per family, named as the family and pointing at its
ModelFamily (an instance or the class)::

    [project.entry-points."anydev.models"]
    toy = "my_package.toy_family:FAMILY"

A family whose entry point cannot be loaded or is not a valid family is kept as *broken*: asking for
it raises :class:`ModelRegistrationError` with the cause, and every other family still works.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import threading

from .family import ModelFamily

#: The built-in families' modules (adding a family: one module under families/ and one line here).
BUILTIN_FAMILIES = (
    "anydev.core.models.families.llama",
    "anydev.core.models.families.mistral",
    "anydev.core.models.families.qwen2",
    "anydev.core.models.families.qwen3",
    "anydev.core.models.families.qwen3_moe",
)
ENTRY_POINT_GROUP = "anydev.models"


class ModelRegistrationError(ValueError):
    """A model family that cannot be registered (not a ModelFamily, no name, a name or an HF/GGUF
    architecture another family already claims, an entry point that fails to load). The message
    names the family, where it came from and what to fix."""


class UnknownModelFamilyError(KeyError):
    """No registered family has this name; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def check_family(family, source: str) -> ModelFamily:
    """``family`` (a ModelFamily instance, or a subclass to instantiate) checked, or
    ModelRegistrationError saying what is wrong with it."""
    if isinstance(family, type) and issubclass(family, ModelFamily):
        family = family()
    if not isinstance(family, ModelFamily):
        raise ModelRegistrationError(f"{source}: gives {family!r}, not an anydev.core.models.family.ModelFamily "
                                     "(subclass it, or point the entry point at its FAMILY)")
    if not isinstance(family.name, str) or not family.name.isidentifier():
        raise ModelRegistrationError(f"{source}: family name {family.name!r} must be a non-empty identifier "
                                     "(HF's model_type, e.g. 'qwen3')")
    for attr in ("hf_architectures", "gguf_architectures"):
        value = getattr(family, attr)
        if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
            raise ModelRegistrationError(f"{source}: family '{family.name}': {attr} must be a tuple of names, "
                                         f"got {value!r}")
    if not isinstance(family.rank_class, type):
        raise ModelRegistrationError(f"{source}: family '{family.name}': rank_class must be a class, "
                                     f"got {family.rank_class!r}")
    return family


class ModelRegistry:
    """The families known to this process, discovered on first use."""

    def __init__(self, builtin_modules=BUILTIN_FAMILIES, entry_point_group: str | None = ENTRY_POINT_GROUP):
        self._builtin = builtin_modules
        self._group = entry_point_group
        self._families: dict[str, ModelFamily] = {}
        self._sources: dict[str, str] = {}
        self.broken: dict[str, str] = {}       # family name -> why it could not be registered
        self._discovered = False
        self._lock = threading.RLock()

    def _discover(self) -> None:
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            for module in self._builtin:       # a broken built-in is a bug: raise
                self._add(importlib.import_module(module).FAMILY, f"built-in module {module}")
            if self._group:
                for ep in importlib.metadata.entry_points(group=self._group):
                    source = f"entry point {ep.name} = {ep.value} (group {self._group})"
                    try:
                        family = check_family(ep.load(), source)
                        if family.name != ep.name:
                            raise ModelRegistrationError(f"{source}: the entry point is named '{ep.name}' but its "
                                                         f"family is '{family.name}'; name the entry point as the family")
                        self._add(family, source)
                    except Exception as exc:       # kept, raised when the family is asked for
                        self.broken[ep.name] = f"{type(exc).__name__}: {exc}"

    def register(self, family, source: str = "register_family()") -> ModelFamily:
        """Add ``family`` (checked by :func:`check_family`); ModelRegistrationError on a clash."""
        self._discover()
        return self._add(family, source)

    def _add(self, family, source: str) -> ModelFamily:
        family = check_family(family, source)
        with self._lock:
            if family.name in self._families:
                raise ModelRegistrationError(f"{source}: family '{family.name}' is already registered by "
                                             f"{self._sources[family.name]}")
            for attr in ("hf_architectures", "gguf_architectures"):
                for value in getattr(family, attr):
                    owner = next((f for f in self._families.values() if value in getattr(f, attr)), None)
                    if owner is not None:
                        raise ModelRegistrationError(f"{source}: family '{family.name}' claims {attr} '{value}', "
                                                     f"which family '{owner.name}' already reads")
            self._families[family.name] = family
            self._sources[family.name] = source
            return family

    def unregister(self, name: str) -> None:
        """Remove family ``name`` (tests that register a family of their own)."""
        with self._lock:
            self._families.pop(name, None)
            self._sources.pop(name, None)

    def names(self) -> list[str]:
        self._discover()
        return list(self._families)

    def get(self, name: str) -> ModelFamily:
        """The family ``name``; ModelRegistrationError for a broken one, UnknownModelFamilyError else."""
        self._discover()
        family = self._families.get(name)
        if family is not None:
            return family
        if name in self.broken:
            raise ModelRegistrationError(f"model family '{name}' could not be registered: {self.broken[name]}")
        raise UnknownModelFamilyError(f"architecture {name!r} is not supported; supported: {', '.join(self.names())}")

    def for_hf(self, config: dict) -> ModelFamily | None:
        """The family of a parsed config.json (its ``model_type``, else its ``architectures``), or None."""
        self._discover()
        model_type = config.get("model_type")
        if model_type in self._families:
            return self._families[model_type]
        if model_type in self.broken:
            self.get(model_type)
        for class_name in config.get("architectures") or []:
            for family in self._families.values():
                if class_name in family.hf_architectures:
                    return family
        return None

    def for_gguf(self, gguf_arch: str) -> ModelFamily | None:
        """The family that reads GGUF architecture ``gguf_arch``, or None."""
        self._discover()
        return next((f for f in self._families.values() if gguf_arch in f.gguf_architectures), None)

    def gguf_architectures(self) -> list[str]:
        self._discover()
        return [arch for family in self._families.values() for arch in family.gguf_architectures]


_registry = ModelRegistry()


def model_registry() -> ModelRegistry:
    """The process-wide registry."""
    return _registry


def family_of(config_or_name) -> ModelFamily:
    """The family of a ModelConfig (its ``architecture``) or of a family name."""
    name = config_or_name if isinstance(config_or_name, str) else config_or_name.architecture
    return _registry.get(name)


def register_family(family) -> ModelFamily:
    """Register ``family`` in this process (a ModelFamily, or its class). Ranks in other processes
    (the ``mp`` and ``torchrun`` executors) see only families registered through the entry points."""
    return _registry.register(family)
