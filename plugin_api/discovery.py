"""Finding backends: built-in plugin modules and third-party entry points, through one pluggy hook.

Nothing here falls back: asking for a backend by name gives that backend or a typed error (unknown
name → the known names; broken plugin → its name and cause; unavailable runtime → what was searched).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import threading
from dataclasses import dataclass

import pluggy

from . import hookspecs
from .errors import BackendUnavailableError, PluginError, UnknownBackendError
from .objects import Backend
from .runtime import REQUIRED_CALLS, DeviceRuntime
from .version import check_compatible

BUILTIN_PLUGINS = (
    "anydev.backends.cpu.plugin",
    "anydev.backends.nvidia.plugin",
    "anydev.backends.moore.plugin",
    "anydev.backends.metax.plugin",
)
#: Environment variable naming the backend to use when a program is given none.
DEVICE_ENV = "ANYDEV_DEVICE"


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that could not be imported, registered or accepted, with the cause."""

    name: str
    source: str
    cause: str


class Registry:
    """The backends known to this process. ``Registry()`` discovers them; ``load(name)`` loads one."""

    def __init__(self, builtin_modules=BUILTIN_PLUGINS, entry_point_group: str | None = hookspecs.ENTRY_POINT_GROUP):
        self.plugin_manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.plugin_manager.add_hookspecs(hookspecs.BackendHookSpecs)
        self.plugins: dict[str, hookspecs.BackendPlugin] = {}
        self.sources: dict[str, str] = {}
        self.broken: dict[str, BrokenPlugin] = {}
        self._loaded: dict[str, Backend] = {}
        self._lock = threading.Lock()
        for module_name in builtin_modules:
            # "anydev.backends.nvidia.plugin" is the plugin of the backend "nvidia"
            name = module_name.rsplit(".", 2)[-2] if module_name.endswith(".plugin") else module_name
            self._register(name, f"built-in module {module_name}", lambda m=module_name: importlib.import_module(m))
        if entry_point_group:
            for ep in importlib.metadata.entry_points(group=entry_point_group):
                self._register(ep.name, f"entry point {ep.name} = {ep.value}", ep.load)
        self._collect()

    def _register(self, name: str, source: str, load) -> None:
        try:
            self.plugin_manager.register(load(), name=source)
        except Exception as exc:  # reported, not swallowed: see names() / load()
            self.broken[name] = BrokenPlugin(name, source, f"{type(exc).__name__}: {exc}")

    def add(self, plugin: object, source: str) -> None:
        """Register one more plugin object (with an ``anydev_backends`` hookimpl) after discovery, as
        the conformance suite's mutation runner does for its deliberately broken backends. Its
        backends are checked like discovered ones; a clash or a bad declaration lands in ``broken``."""
        self._register(source, source, lambda: plugin)
        self._collect(only=source)

    def _collect(self, only: str | None = None) -> None:
        for impl in self.plugin_manager.hook.anydev_backends.get_hookimpls():
            source = impl.plugin_name
            if only is not None and source != only:
                continue
            try:
                declared = impl.function()
                declared = [declared] if isinstance(declared, hookspecs.BackendPlugin) else list(declared or [])
            except Exception as exc:
                self.broken[source] = BrokenPlugin(source, source, f"anydev_backends() raised {type(exc).__name__}: {exc}")
                continue
            for plugin in declared:
                try:
                    if not isinstance(plugin, hookspecs.BackendPlugin):
                        raise PluginError(f"anydev_backends() returned {plugin!r}, not a BackendPlugin")
                    check_compatible(plugin.name, plugin.contract_version)
                    if plugin.name in self.plugins:
                        raise PluginError(
                            f"backend name '{plugin.name}' is registered twice ({self.sources[plugin.name]} and {source})"
                        )
                except PluginError as exc:
                    name = getattr(plugin, "name", source)
                    self.broken[name] = BrokenPlugin(name, source, str(exc))
                    continue
                self.plugins[plugin.name] = plugin
                self.sources[plugin.name] = source

    def names(self) -> list[str]:
        """Every backend name, registered or broken, sorted."""
        return sorted(set(self.plugins) | set(self.broken))

    def load(self, name: str) -> Backend:
        """The backend ``name``, loaded once per registry. Never substitutes another backend."""
        if name in self.broken:
            broken = self.broken[name]
            raise PluginError(f"backend plugin '{name}' ({broken.source}) is broken: {broken.cause}")
        if name not in self.plugins:
            raise UnknownBackendError(name, self.names())
        with self._lock:
            backend = self._loaded.get(name)
            if backend is None or backend.closed:
                backend = Backend(self._build_runtime(self.plugins[name]))
                self._loaded[name] = backend
            return backend

    def _build_runtime(self, plugin: hookspecs.BackendPlugin) -> DeviceRuntime:
        runtime = plugin.load()
        if not isinstance(runtime, DeviceRuntime):
            raise PluginError(f"backend '{plugin.name}': load() returned {type(runtime).__name__}, not a DeviceRuntime")
        _declare_on_runtime(plugin, runtime)
        missing = [call for call in REQUIRED_CALLS if not callable(getattr(runtime, call, None))]
        if missing:
            raise PluginError(f"backend '{plugin.name}' lacks required calls: {', '.join(missing)}")
        return runtime


def _declare_on_runtime(plugin: hookspecs.BackendPlugin, runtime: DeviceRuntime) -> None:
    """Set the plugin's name and contract version on its runtime: they are declared once, on the
    plugin (contract 1.6). A runtime that declares its own (the style up to 1.5) keeps them, checked:
    the same name, and a version this anydev accepts."""
    if runtime.name and runtime.name != plugin.name:
        raise PluginError(
            f"backend '{plugin.name}': its runtime calls itself '{runtime.name}'. The name is declared once, "
            f"on the BackendPlugin (contract 1.6): remove the runtime's name, or make it '{plugin.name}'"
        )
    runtime.name = plugin.name
    if tuple(runtime.contract_version) == DeviceRuntime.contract_version:
        runtime.contract_version = tuple(plugin.contract_version)
    else:
        check_compatible(plugin.name, runtime.contract_version)


_default_registry: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry (discovered on first use)."""
    global _default_registry
    with _default_lock:
        if _default_registry is None:
            _default_registry = Registry()
        return _default_registry


def default_backend_name() -> str:
    """The backend a program uses when it is given none: ``$ANYDEV_DEVICE``, else ``cpu``."""
    return os.environ.get(DEVICE_ENV, "").strip() or "cpu"


def load_backend(name: str | None = None) -> Backend:
    """Load the backend ``name`` (default: :func:`default_backend_name`)."""
    if name is not None:
        return get_registry().load(name)
    name = default_backend_name()
    try:
        return get_registry().load(name)
    except UnknownBackendError as exc:
        if not os.environ.get(DEVICE_ENV, "").strip():
            raise
        raise UnknownBackendError(name, exc.known, named_by=f"${DEVICE_ENV}") from None


__all__ = ["Registry", "BrokenPlugin", "get_registry", "load_backend", "default_backend_name", "BackendUnavailableError"]
