"""`anydev new-backend NAME`: the skeleton installs as a plugin and every stub names its call."""
from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from dist_info import write_dist_info

from anydev.cli import scaffold
from anydev.plugin_api import REQUIRED_CALLS, BackendUnavailableError, DeviceRuntime, NotSupportedError, Registry

EMULATED_SOURCES = Path(scaffold.__file__).parents[1] / "conformance" / "emulated"


def _generate(tmp_path, monkeypatch, name: str, prefix: str | None = None):
    """Generate backend ``name`` into tmp_path and put it on sys.path with its dist-info."""
    root = scaffold.new_backend(name, tmp_path / "pkg", prefix=prefix)
    write_dist_info(root, into=root)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for module in [m for m in sys.modules if m.startswith(f"anydev_{name}")]:
        del sys.modules[module]


@pytest.fixture
def skeleton(tmp_path, monkeypatch):
    """The stubbed backend 'scaffoldtest'."""
    yield from _generate(tmp_path, monkeypatch, "scaffoldtest")


@pytest.fixture
def prefix_skeleton(tmp_path, monkeypatch):
    """The backend 'scaffoldxyz' for a CUDA-like runtime with the symbol prefix ``xyz``."""
    yield from _generate(tmp_path, monkeypatch, "scaffoldxyz", prefix="xyz")


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


@pytest.mark.parametrize("which", ["skeleton", "prefix_skeleton"])
def test_skeletons_depend_on_cffi_only_when_their_code_imports_it(request, which):
    """Neither skeleton binds a library with cffi itself (the stubs bind nothing; the CUDA-like core is
    anydev's, which brings cffi): their pyproject does not depend on it."""
    import re

    root = request.getfixturevalue(which)
    dependencies = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    imports_cffi = any(re.search(r"^\s*(import cffi|from cffi)", f.read_text(), re.MULTILINE) for f in root.rglob("*.py"))
    assert any(d.startswith("cffi") for d in dependencies) == imports_cffi, (root.name, dependencies)
    assert {"anydev", "torch"} <= set(dependencies), dependencies


def test_skeleton_is_discovered_through_its_entry_point_and_loads(skeleton):
    registry = Registry()
    assert "scaffoldtest" in registry.plugins, registry.broken.get("scaffoldtest")
    assert registry.sources["scaffoldtest"].startswith("entry point scaffoldtest")
    backend = registry.load("scaffoldtest")
    assert backend.runtime.contract_version == scaffold.SKELETON_CONTRACT_VERSION
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


def test_anydev_new_backend_subcommand_runs_the_scaffold(tmp_path, capsys):
    from anydev.cli.commands import main

    assert main(["new-backend", "xyz", "--dir", str(tmp_path / "x"), "--prefix", "xyz"]) == 0
    assert "spec.py" in capsys.readouterr().out
    assert (tmp_path / "x" / "anydev_xyz" / "spec.py").is_file()


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
    # the contract group has one failure per call still to write, naming that call
    per_call = {c["check"].split("[")[-1].rstrip("]").split("-")[-1]: c for c in failures
                if "test_required_call_provided" in c["check"]}
    for call in REQUIRED_CALLS:
        assert call in per_call and f"{call} is not implemented yet" in per_call[call]["reason"], call
    # the README's figures for this first run: its length and its count of failing checks
    readme = (Path(scaffold.__file__).parents[1] / "README.md").read_text()
    stated = re.search(r"about (\d+) lines for a fresh skeleton, of\s+its (\d+) failing checks", readme)
    assert stated, "the README no longer states the first run's length"
    printed = len(result.stdout.splitlines())
    assert 0.75 * int(stated[1]) <= printed <= 1.25 * int(stated[1]), (printed, stated[0])
    failing = sum(c["status"] in ("fail", "error") for c in checks)
    assert 0.75 * int(stated[2]) <= failing <= 1.25 * int(stated[2]), (failing, stated[0])


# ---- --prefix: a runtime that mirrors CUDA's ------------------------------------------------------

def test_prefix_skeleton_describes_the_runtime_for_the_cudalike_core(prefix_skeleton):
    from anydev_scaffoldxyz.spec import SPEC

    assert (SPEC.name, SPEC.rt, SPEC.ccl) == ("scaffoldxyz", "xyz", "xyzccl")
    assert SPEC.runtime_library.env_var == "ANYDEV_SCAFFOLDXYZ_RUNTIME_LIBRARY"
    assert not (prefix_skeleton / "anydev_scaffoldxyz" / "runtime.py").exists()


def test_prefix_skeleton_without_its_libraries_is_unavailable_saying_what_was_searched(prefix_skeleton, monkeypatch):
    monkeypatch.delenv("ANYDEV_SCAFFOLDXYZ_RUNTIME_LIBRARY", raising=False)
    registry = Registry()
    assert "scaffoldxyz" in registry.plugins, registry.broken.get("scaffoldxyz")
    with pytest.raises(BackendUnavailableError) as raised:
        registry.load("scaffoldxyz")
    message = str(raised.value)
    assert "libxyzrt" in message and "ANYDEV_SCAFFOLDXYZ_RUNTIME_LIBRARY" in message and "XYZ_HOME" in message


def _build_emulated_xyz_runtime(out: Path) -> tuple[Path, Path]:
    """The conformance suite's emulated CUDA-shaped runtime and MCCL, built with the prefixes xyz and
    xyzccl (one library, as the suite builds it; the collective library's name links to it): what a
    vendor's libxyzrt.so and libxyzccl.so would export."""
    runtime, ccl = out / "libxyzrt.so", out / "libxyzccl.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-pthread", "-DRT=xyz", "-Dmccl=xyzccl", "-DHAS_ERROR_NAME",
                    "-DHAS_RUNTIME_VERSION", str(EMULATED_SOURCES / "runtime.c"), str(EMULATED_SOURCES / "mccl.c"),
                    "-o", str(runtime)], check=True, capture_output=True)
    ccl.symlink_to(runtime.name)
    return runtime, ccl


def test_prefix_skeleton_passes_conformance_on_an_emulated_xyz_runtime(prefix_skeleton, tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the emulated xyz runtime")
    if not (EMULATED_SOURCES / "runtime.c").is_file():
        pytest.skip("the conformance suite's emulated runtime sources are not in this checkout")
    runtime, ccl = _build_emulated_xyz_runtime(tmp_path)
    report_file = tmp_path / "xyz.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(prefix_skeleton), os.environ.get("PYTHONPATH", "")]),
               ANYDEV_SCAFFOLDXYZ_RUNTIME_LIBRARY=str(runtime), ANYDEV_SCAFFOLDXYZ_CCL_LIBRARY=str(ccl))
    result = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "scaffoldxyz", "--report", str(report_file)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    report = json.loads(report_file.read_text())
    assert report["hardware"]["scaffoldxyz"] == "emulated runtime"
    statuses = [c["status"] for c in report["checks"]]
    assert "fail" not in statuses and statuses.count("pass") > len(statuses) // 2


def test_skeleton_declares_the_contract_version_the_guide_shows(skeleton):
    """The skeleton declares its name and version once, on the plugin: the version whose runtimes
    declare neither (1.6), the literal of the guide's plugin example; its runtime declares nothing."""
    from anydev_scaffoldtest import plugin
    from anydev_scaffoldtest.runtime import ScaffoldtestRuntime

    from anydev.plugin_api import DeviceRuntime

    assert plugin.CONTRACT_VERSION == (1, 6) and plugin.NAME == "scaffoldtest"
    assert ScaffoldtestRuntime.contract_version == DeviceRuntime.contract_version and ScaffoldtestRuntime.name == ""
    guide = (Path(scaffold.__file__).parents[1] / "docs" / "writing-a-backend.md").read_text()
    assert f"CONTRACT_VERSION = {plugin.CONTRACT_VERSION!r}" in guide
