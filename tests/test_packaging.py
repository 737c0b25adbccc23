"""The wheel pyproject.toml builds holds every package folder and module of the repository, the
mutants, the emulated runtimes' C sources and the scaffold's templates, and the console script's module."""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import anydev

ROOT = Path(anydev.__file__).resolve().parent
#: Top-level folders that stay outside the installed package (pyproject.toml's package-dir comment).
OUTSIDE = {"tests", "examples", "benchmarks", "parts", "scripts", "docs", "results", "build", "dist"}


def package_files(pattern: str) -> set[str]:
    """The repository's files matching ``pattern`` under its package folders, as wheel paths."""
    found = set()
    for path in ROOT.rglob(pattern):
        parts = path.relative_to(ROOT).parts
        if parts[0] in OUTSIDE or any(part.startswith(".") or part == "__pycache__" or part.endswith(".egg-info")
                                      for part in parts):
            continue
        found.add("/".join(("anydev", *parts)))
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel, built from a copy of the source tree (the build leaves nothing in the repository)."""
    source = tmp_path_factory.mktemp("source") / "anydev"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "results", "build", "dist", "*.egg-info",
                                                                "__pycache__", ".pytest_cache"))
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                             "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("anydev-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_every_package_folder_and_module_is_in_the_wheel(wheel):
    packages = package_files("__init__.py")
    assert {"anydev/__init__.py", "anydev/cli/__init__.py", "anydev/conformance/mutants/__init__.py"} <= packages
    missing = package_files("*.py") - set(wheel.namelist())
    assert not missing, f"not in the wheel (add their packages to pyproject.toml): {sorted(missing)}"


def test_the_mutants_can_run_from_the_wheel(wheel):
    assert {"anydev/conformance/mutants/__init__.py", "anydev/conformance/mutants/__main__.py"} <= set(wheel.namelist())


def test_the_emulated_runtimes_sources_and_the_scaffold_templates_are_in_the_wheel(wheel):
    data = package_files("*.c") | package_files("*.h") | package_files("*.tmpl")
    assert {"anydev/conformance/emulated/runtime.c", "anydev/conformance/emulated/emulated.h",
            "anydev/cli/templates/runtime.py.tmpl"} <= data
    missing = data - set(wheel.namelist())
    assert not missing, f"data files not in the wheel (pyproject.toml's package-data): {sorted(missing)}"


def test_the_console_script_names_a_module_of_the_wheel(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    config = configparser.ConfigParser()
    config.read_string(wheel.read(entry_points).decode())
    module, _, function = config["console_scripts"]["anydev"].partition(":")
    assert module.replace(".", "/") + ".py" in wheel.namelist() and function == "entry"
