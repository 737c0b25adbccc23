"""`anydev new-backend NAME`: the skeleton installs as a plugin and every stub names its call."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tomllib

import pytest

from anydev import scaffold
from anydev.plugin_api import REQUIRED_CALLS, DeviceRuntime, NotSupportedError, Registry, hookspecs


def _install_without_pip(root, distribution: str) -> None:
    """Make ``root`` importable and give it a dist-info built from its own pyproject's entry points,
    as ``pip install -e`` would, so that anydev's entry-point discovery finds it."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    entry_points = project["entry-points"][hookspecs.ENTRY_POINT_GROUP]
    dist_info = root / f"{distribution.replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {project['version']}\n")
    lines = [f"[{hookspecs.ENTRY_POINT_GROUP}]"] + [f"{name} = {target}" for name, target in entry_points.items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def skeleton(tmp_path, monkeypatch):
    """The backend 'scaffoldtest' generated into tmp_path and put on sys.path with its dist-info."""
    root = scaffold.new_backend("scaffoldtest", tmp_path / "pkg")
    _install_without_pip(root, "anydev-scaffoldtest")
    monkeypatch.syspath_prepend(str(root))
    yield root
    for module in [m for m in sys.modules if m.startswith("anydev_scaffoldtest")]:
        del sys.modules[module]


def _dummy_arguments(call: str) -> list:
    parameters = list(inspect.signature(getattr(DeviceRuntime, call)).parameters)[1:]  # without self
    return [0] * len(parameters)


def test_skeleton_has_the_package_layout_and_entry_point(skeleton):
    project = tomllib.loads((skeleton / "pyproject.toml").read_text())["project"]
    assert project["name"] == "anydev-scaffoldtest"
    assert project["entry-points"]["anydev.backends"] == {"scaffoldtest": "anydev_scaffoldtest.plugin"}
    for relative in ("README.md", "anydev_scaffoldtest/__init__.py", "anydev_scaffoldtest/plugin.py",
                     "anydev_scaffoldtest/runtime.py"):
        assert (skeleton / relative).is_file(), relative


def test_skeleton_is_discovered_through_its_entry_point_and_loads(skeleton):
    registry = Registry()
    assert "scaffoldtest" in registry.plugins, registry.broken.get("scaffoldtest")
    assert registry.sources["scaffoldtest"].startswith("entry point scaffoldtest")
    backend = registry.load("scaffoldtest")
    assert backend.runtime.contract_version == scaffold.CONTRACT_VERSION
    assert not backend.supports("runtime_info")


@pytest.mark.parametrize("call", REQUIRED_CALLS)
def test_every_stub_raises_not_supported_naming_its_call(skeleton, call):
    from anydev_scaffoldtest.runtime import ScaffoldtestRuntime

    runtime = ScaffoldtestRuntime()
    with pytest.raises(NotSupportedError) as raised:
        getattr(runtime, call)(*_dummy_arguments(call))
    assert str(raised.value) == f"{call} is not implemented yet: fill it in in runtime.py"


def test_stubs_carry_the_contract_signatures_and_docstrings(skeleton):
    from anydev_scaffoldtest.runtime import ScaffoldtestRuntime

    for call in REQUIRED_CALLS:
        stub, spec = getattr(ScaffoldtestRuntime, call), getattr(DeviceRuntime, call)
        assert list(inspect.signature(stub).parameters) == list(inspect.signature(spec).parameters), call
        assert inspect.getdoc(stub) == inspect.getdoc(spec), call


@pytest.mark.parametrize("bad_name", ["Xyz", "9lives", "my-backend", "", "cpu", "nvidia"])
def test_bad_or_builtin_names_are_refused(tmp_path, bad_name):
    with pytest.raises(scaffold.ScaffoldError):
        scaffold.new_backend(bad_name, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_non_empty_directory_is_not_overwritten(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(scaffold.ScaffoldError, match="not empty"):
        scaffold.new_backend("xyz", tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "pyproject.toml").exists()


def test_command_line_writes_the_skeleton_and_says_what_next(tmp_path, capsys):
    assert scaffold.main(["xyz", "--dir", str(tmp_path / "x")]) == 0
    assert "python -m anydev.conformance --device xyz" in capsys.readouterr().out
    assert (tmp_path / "x" / "anydev_xyz" / "runtime.py").is_file()
    assert scaffold.main(["Bad Name", "--dir", str(tmp_path / "y")]) == 2
