"""Discovery: built-in backends and third-party entry points come through one pluggy hook; broken or
incompatible plugins are reported with their name and cause; a name gives that backend or an error.

Third-party plugins here are real installed-looking packages: a ``*.dist-info`` folder (METADATA and
entry_points.txt) and a module, in a temporary folder put on ``sys.path``, found by
``importlib.metadata`` exactly as a pip-installed plugin would be.
"""
from __future__ import annotations

import re
import sys
import textwrap

import pytest

from anydev.plugin_api import (
    CONTRACT_VERSION, BackendUnavailableError, ContractVersionError, PluginError, Registry,
    UnknownBackendError, load_backend,
)
from anydev.plugin_api import discovery

BUILTIN_NAMES = ("cpu", "nvidia", "moore", "metax")
CPU_ONLY = ("anydev.backends.cpu.plugin",)

PLUGIN_TEMPLATE = '''
from anydev.backends.cpu.runtime import CpuRuntime
from anydev.plugin_api import BackendPlugin, hookimpl


class {cls}(CpuRuntime):
    name = "{name}"


@hookimpl
def anydev_backends():
    return [BackendPlugin(name="{name}", contract_version={version}, load={load})]
'''


@pytest.fixture
def install(tmp_path, monkeypatch):
    """``install(package, {entry_name: module}, {module: source})``: a package as pip would leave it."""

    def install_package(package: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
        dist_info = tmp_path / f"{package}-0.1.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
        lines = ["[anydev.backends]"] + [f"{name} = {module}" for name, module in entry_points.items()]
        (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for module, source in modules.items():
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
            monkeypatch.delitem(sys.modules, module, raising=False)  # and removed again after the test

    monkeypatch.syspath_prepend(str(tmp_path))
    return install_package


def plugin_source(name: str, version=CONTRACT_VERSION, load: str | None = None) -> str:
    cls = f"{name.capitalize()}Runtime"
    return PLUGIN_TEMPLATE.format(cls=cls, name=name, version=tuple(version), load=load or cls)


# ---- built-in backends -----------------------------------------------------------------------
def test_builtin_backends_register_through_the_hook():
    registry = Registry(entry_point_group=None)
    assert not registry.broken, registry.broken
    for name in BUILTIN_NAMES:
        assert registry.sources[name] == f"built-in module anydev.backends.{name}.plugin"
        assert registry.plugins[name].contract_version == CONTRACT_VERSION


def test_a_registry_of_the_cpu_plugin_alone_knows_only_cpu():
    registry = Registry(builtin_modules=CPU_ONLY, entry_point_group=None)
    assert registry.names() == ["cpu"]
    assert registry.load("cpu").name == "cpu"


def test_a_backend_is_loaded_once_per_registry_and_again_after_close():
    registry = Registry(builtin_modules=CPU_ONLY, entry_point_group=None)
    first = registry.load("cpu")
    assert registry.load("cpu") is first
    first.close()
    second = registry.load("cpu")
    assert second is not first and not second.closed
    second.close()


# ---- third-party plugins ---------------------------------------------------------------------
def test_an_entry_point_plugin_is_found_and_loads(install):
    install("fakepkg", {"fakedev": "discovery_fakedev"}, {"discovery_fakedev": plugin_source("fakedev")})
    registry = Registry(builtin_modules=CPU_ONLY)
    assert registry.sources["fakedev"] == "entry point fakedev = discovery_fakedev"
    backend = registry.load("fakedev")
    assert backend.name == "fakedev"
    buffer = backend.device(0).alloc(32)  # a working backend, not just a registration
    buffer.free()
    backend.close()


def test_a_plugin_that_fails_to_import_is_reported_with_its_cause(install):
    install("brokenpkg", {"brokendev": "discovery_brokendev"},
            {"discovery_brokendev": "import anydev_module_that_does_not_exist\n"})
    registry = Registry(builtin_modules=CPU_ONLY)
    broken = registry.broken["brokendev"]
    assert "ModuleNotFoundError" in broken.cause and "anydev_module_that_does_not_exist" in broken.cause
    assert "brokendev" in registry.names()
    with pytest.raises(PluginError, match=r"'brokendev'.*anydev_module_that_does_not_exist"):
        registry.load("brokendev")
    assert registry.load("cpu").name == "cpu"  # the others still work


def test_a_plugin_whose_hook_raises_is_reported(install):
    source = '''
        from anydev.plugin_api import hookimpl

        @hookimpl
        def anydev_backends():
            raise RuntimeError("vendor SDK misconfigured")
    '''
    install("raisingpkg", {"raisingdev": "discovery_raisingdev"}, {"discovery_raisingdev": source})
    registry = Registry(builtin_modules=CPU_ONLY)
    (broken,) = [b for b in registry.broken.values() if "raisingdev" in b.source]
    assert "RuntimeError: vendor SDK misconfigured" in broken.cause


def test_a_plugin_for_another_major_contract_is_refused_naming_both_versions(install):
    install("futurepkg", {"futuredev": "discovery_futuredev"},
            {"discovery_futuredev": plugin_source("futuredev", version=(2, 0))})
    registry = Registry(builtin_modules=CPU_ONLY)
    assert "futuredev" not in registry.plugins
    cause = registry.broken["futuredev"].cause
    host = f"{CONTRACT_VERSION[0]}.{CONTRACT_VERSION[1]}"
    assert "2.0" in cause and host in cause
    with pytest.raises(PluginError, match=rf"futuredev.*2\.0.*{re.escape(host)}"):
        registry.load("futuredev")


def test_a_runtime_for_another_major_contract_is_refused_at_load(install):
    source = plugin_source("liardev") + "\nLiardevRuntime.contract_version = (2, 0)\n"
    install("liarpkg", {"liardev": "discovery_liardev"}, {"discovery_liardev": source})
    registry = Registry(builtin_modules=CPU_ONLY)
    host = f"{CONTRACT_VERSION[0]}.{CONTRACT_VERSION[1]}"
    with pytest.raises(ContractVersionError, match=rf"2\.0.*{re.escape(host)}"):
        registry.load("liardev")


def test_a_later_minor_contract_version_is_accepted(install):
    major, minor = CONTRACT_VERSION
    install("minorpkg", {"minordev": "discovery_minordev"},
            {"discovery_minordev": plugin_source("minordev", version=(major, minor + 1))})
    registry = Registry(builtin_modules=CPU_ONLY)
    assert "minordev" in registry.plugins and "minordev" not in registry.broken


def test_a_name_registered_twice_is_refused_rather_than_guessed(install):
    source = plugin_source("impostor").replace('name = "impostor"', 'name = "cpu"').replace('name="impostor"', 'name="cpu"')
    install("impostorpkg", {"impostor": "discovery_impostor"}, {"discovery_impostor": source})
    registry = Registry(builtin_modules=CPU_ONLY)
    assert "registered twice" in registry.broken["cpu"].cause
    with pytest.raises(PluginError, match="registered twice"):
        registry.load("cpu")


# ---- choosing by name ------------------------------------------------------------------------
def test_an_unknown_name_lists_the_known_ones():
    registry = Registry(builtin_modules=CPU_ONLY, entry_point_group=None)
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'tpu'; known backends: cpu") as caught:
        registry.load("tpu")
    assert caught.value.known == ["cpu"]


def test_the_device_environment_variable_names_the_backend(monkeypatch):
    monkeypatch.setattr(discovery, "_default_registry", Registry(builtin_modules=CPU_ONLY, entry_point_group=None))
    monkeypatch.setenv(discovery.DEVICE_ENV, "nosuchdev")
    with pytest.raises(UnknownBackendError, match="nosuchdev"):
        load_backend()
    monkeypatch.delenv(discovery.DEVICE_ENV)
    assert load_backend().name == "cpu"


def test_an_unavailable_backend_raises_and_is_never_substituted(install):
    source = plugin_source("gonedev", load="load_gonedev") + textwrap.dedent('''
        from anydev.plugin_api import BackendUnavailableError

        def load_gonedev():
            raise BackendUnavailableError("gonedev", "libgone.so not found", ["/opt/gone/lib", "GONE_HOME"])
    ''')
    install("gonepkg", {"gonedev": "discovery_gonedev"}, {"discovery_gonedev": source})
    registry = Registry(builtin_modules=CPU_ONLY)
    with pytest.raises(BackendUnavailableError, match=r"gonedev.*libgone\.so.*GONE_HOME"):
        registry.load("gonedev")
    with pytest.raises(BackendUnavailableError):
        registry.load("gonedev")  # asked again: still that backend's error, not another backend


@pytest.mark.parametrize("name", ["nvidia", "moore", "metax"])
def test_a_vendor_backend_is_that_backend_or_says_why_not(name):
    registry = Registry(entry_point_group=None)
    try:
        backend = registry.load(name)
    except BackendUnavailableError as exc:
        assert exc.backend == name and exc.reason
    else:
        assert backend.name == name
        backend.close()
