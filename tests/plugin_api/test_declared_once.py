"""The backend's name and contract version are declared once, on its BackendPlugin (contract 1.6):
the registry sets them on the runtime; a 1.5-style runtime that declares them too still loads when
they agree, and one whose name contradicts its plugin is refused."""
from __future__ import annotations

import sys
import types

import pytest

from anydev.plugin_api import (
    BackendPlugin, ContractVersionError, DeviceRuntime, PluginError, Registry, hookimpl,
)
from anydev.plugin_api import runtime as runtime_module


def _runtime_class(**declared) -> type[DeviceRuntime]:
    """A runtime with every required call (each returns its name) and the class attributes ``declared``."""

    def make_call(call):
        def body(self, *args, **kwargs):
            return call
        return body

    methods = {call: make_call(call) for call in runtime_module.REQUIRED_CALLS}
    return type("DeclaredRuntime", (DeviceRuntime,), dict(methods, torch_device_type="cpu", **declared))


def _registry(monkeypatch, name: str, version, runtime_cls) -> Registry:
    module = types.ModuleType(f"declared_once_plugin_{name}")
    module.anydev_backends = hookimpl(lambda: [BackendPlugin(name=name, contract_version=version, load=runtime_cls)])
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return Registry(builtin_modules=(module.__name__,), entry_point_group=None)


def test_a_runtime_that_declares_nothing_gets_the_plugins_name_and_version(monkeypatch):
    backend = _registry(monkeypatch, "once", (1, 6), _runtime_class()).load("once")
    assert backend.name == backend.runtime.name == "once"
    assert backend.runtime.contract_version == (1, 6)
    assert backend.runtime.device_count() == "device_count"


def test_a_1_5_style_runtime_declaring_both_still_loads(monkeypatch):
    runtime_cls = _runtime_class(name="twice", contract_version=(1, 5))
    backend = _registry(monkeypatch, "twice", (1, 5), runtime_cls).load("twice")
    assert backend.name == "twice" and backend.runtime.contract_version == (1, 5)


def test_a_runtime_whose_name_contradicts_its_plugin_is_refused_naming_both(monkeypatch):
    registry = _registry(monkeypatch, "plugname", (1, 5), _runtime_class(name="othername", contract_version=(1, 5)))
    with pytest.raises(PluginError, match=r"'plugname'.*calls itself 'othername'.*declared once"):
        registry.load("plugname")


def test_a_runtime_declaring_another_major_is_still_refused(monkeypatch):
    registry = _registry(monkeypatch, "major", (1, 6), _runtime_class(contract_version=(2, 0)))
    with pytest.raises(ContractVersionError, match=r"2\.0"):
        registry.load("major")


def test_the_built_in_and_example_runtimes_leave_their_version_to_the_plugin():
    """cpu, the CUDA-like core and the example backend declare the version on the plugin only."""
    pytest.importorskip("anydev_hostdev", reason="the example backend is not installed "
                                                 "(pip install -e examples/out_of_tree_backend)")
    from anydev_hostdev import plugin as hostdev_plugin
    from anydev_hostdev.runtime import HostDevRuntime

    from anydev.backends.cpu.runtime import CpuRuntime
    from anydev.backends.cudalike.runtime import CudaLikeRuntime

    for runtime_cls in (CpuRuntime, CudaLikeRuntime, HostDevRuntime):
        assert "contract_version" not in vars(runtime_cls), runtime_cls
    assert "name" not in vars(HostDevRuntime) and "name" not in vars(CudaLikeRuntime)
    hostdev = Registry(builtin_modules=("anydev_hostdev.plugin",), entry_point_group=None).load("hostdev")
    assert (hostdev.name, hostdev.runtime.contract_version) == (hostdev_plugin.NAME, hostdev_plugin.CONTRACT_VERSION)
    hostdev.close()
