"""`anydev new-backend NAME`: the skeleton installs as a plugin and every stub names its call."""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
from dist_info import write_dist_info

from anydev import scaffold
from anydev.plugin_api import REQUIRED_CALLS, DeviceRuntime, NotSupportedError, Registry


@pytest.fixture
def skeleton(tmp_path, monkeypatch):
    """The backend 'scaffoldtest' generated into tmp_path and put on sys.path with its dist-info."""
    root = scaffold.new_backend("scaffoldtest", tmp_path / "pkg")
    write_dist_info(root, into=root)
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


def test_conformance_run_fails_only_on_stubbed_calls_each_named(skeleton, tmp_path):
    try:
        import anydev.conformance.__main__  # noqa: F401
    except ImportError:
        pytest.skip("the conformance suite (anydev.conformance) is not in this checkout yet")
    report_file = tmp_path / "skeleton.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(skeleton), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "scaffoldtest", "--report", str(report_file)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode != 0, "a skeleton of stubs must not pass the conformance suite"
    checks = json.loads(report_file.read_text())["checks"]
    failures = [c for c in checks if c["status"] == "fail"]
    assert failures, result.stdout[-3000:]
    stub_message = re.compile(r"(\w+) is not implemented yet: fill it in in runtime.py")
    for check in failures:
        named = stub_message.search(check["reason"] or "")
        assert named and named.group(1) in REQUIRED_CALLS, f"{check['check']} failed for another reason: {check['reason']}"
