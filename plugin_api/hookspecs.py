"""The pluggy hooks a backend plugin implements. Built-in backends use exactly these hooks.

A plugin is a module (or object) with a function marked ``@hookimpl``::

    from anydev.plugin_api import BackendPlugin, hookimpl

    @hookimpl
    def anydev_backends():
        return [BackendPlugin(name="xyz", contract_version=(1, 6), load=load_xyz_runtime)]

and, for a third-party package, an entry point in the group ``anydev.backends``::

    [project.entry-points."anydev.backends"]
    xyz = "anydev_xyz.plugin"
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pluggy

PROJECT = "anydev"
ENTRY_POINT_GROUP = "anydev.backends"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True)
class BackendPlugin:
    """What a plugin declares about one backend, cheaply (no library loading, no device context).

    ``name`` (as users type it, ``--device NAME``) and ``contract_version`` (the ``(major, minor)``
    the plugin was written for) are declared here only: the registry sets both on the runtime that
    ``load()`` returns (contract 1.6; up to 1.5 the runtime declared them too, and such a runtime
    still loads when they agree). ``load()`` builds the :class:`~anydev.plugin_api.runtime.DeviceRuntime`; it raises
    :class:`~anydev.plugin_api.errors.BackendUnavailableError` when the vendor libraries or devices
    are missing, saying which names, paths and environment variables it searched.
    """

    name: str
    contract_version: tuple[int, int]
    load: Callable[[], object]
    description: str = ""


class BackendHookSpecs:
    @hookspec
    def anydev_backends(self) -> list[BackendPlugin]:
        """Return the backends this plugin provides (usually one). Must not load vendor libraries."""
