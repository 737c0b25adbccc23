"""`anydev list-backends` on a machine without GPUs: cpu available, nvidia/moore/metax unavailable with
the libraries, paths and environment variables searched."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from anydev.cli.list_backends import describe_backends, format_table
from anydev.plugin_api import CONTRACT_VERSION, Registry
from anydev.plugin_api.version import format_version

# The library an unavailable backend's row must name (nvidia: NCCL when the CUDA runtime did load).
VENDOR_LIBRARIES = {"nvidia": ("libcudart", "libnccl"), "moore": ("libmusart",), "metax": ("libmcruntime",)}
# Variables that could point a vendor plugin at a real or emulated library.
LIBRARY_VARS = ("ANYDEV_CUDART_LIBRARY", "ANYDEV_NCCL_LIBRARY", "ANYDEV_MUSART_LIBRARY", "ANYDEV_MUSA_MCCL_LIBRARY",
                "ANYDEV_MCRUNTIME_LIBRARY", "ANYDEV_MACA_MCCL_LIBRARY", "CUDA_HOME", "CUDA_PATH", "MUSA_HOME",
                "MUSA_PATH", "MACA_PATH", "MACA_HOME", "MACA_ROOT", "LD_LIBRARY_PATH")


@pytest.fixture
def clean_env(tmp_path):
    """This process's environment without vendor library variables, plus SDK roots that do not exist."""
    env = {k: v for k, v in os.environ.items() if k not in LIBRARY_VARS}
    env["MUSA_HOME"] = str(tmp_path / "no-musa")
    env["MACA_PATH"] = str(tmp_path / "no-maca")
    return env


def _run(command, env):
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _check_rows(rows: dict, tmp_path) -> None:
    assert rows["cpu"]["available"] is True
    assert rows["cpu"]["device_count"] >= 1
    assert rows["cpu"]["contract_version"] == format_version(CONTRACT_VERSION)
    for name, libraries in VENDOR_LIBRARIES.items():
        row = rows[name]
        if row["available"]:  # only on a machine with that GPU (GPU machines run these tests too)
            assert row["device_count"] >= 1 and row["runtime_version"]
            continue
        text = row["reason"] + " ".join(row["searched"])
        assert any(library in text for library in libraries), text
    assert not rows["moore"]["available"] and not rows["metax"]["available"]
    # The SDK roots given by env vars are named, with the directories tried under them.
    moore, metax = rows["moore"]["searched"], rows["metax"]["searched"]
    assert f"$MUSA_HOME={tmp_path / 'no-musa'}" in moore
    assert f"{tmp_path / 'no-musa' / 'lib'} (no such directory)" in moore
    assert "$ANYDEV_MUSART_LIBRARY (unset)" in moore and "$MUSA_PATH (unset)" in moore
    assert f"$MACA_PATH={tmp_path / 'no-maca'}" in metax
    assert "$ANYDEV_MCRUNTIME_LIBRARY (unset)" in metax and "/opt/maca (default)" in metax
    assert rows["moore"]["reason"].startswith("libmusart not found")
    assert rows["metax"]["reason"].startswith("libmcruntime not found")


def test_python_m_anydev_list_backends_table(clean_env, tmp_path):
    out = _run([sys.executable, "-m", "anydev", "list-backends"], clean_env)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["BACKEND", "AVAILABLE", "DEVICES"]
    status = {line.split()[0]: line.split()[1] for line in lines[1:] if not line.startswith(" ")}
    assert status["cpu"] == "yes"
    assert status["moore"] == status["metax"] == "no"
    assert status["nvidia"] == "yes" or "libcudart" in out or "libnccl" in out
    assert "why: libmusart not found" in out and "why: libmcruntime not found" in out
    assert f"$MUSA_HOME={tmp_path / 'no-musa'}" in out


def test_console_script_json(clean_env, tmp_path):
    script = shutil.which("anydev")
    if script is None:
        pytest.skip("the `anydev` console script is not on PATH (install with pip install -e .)")
    rows = {row["name"]: row for row in json.loads(_run([script, "list-backends", "--json"], clean_env))}
    _check_rows(rows, tmp_path)


def test_broken_plugin_is_a_row_with_its_cause():
    registry = Registry(builtin_modules=("anydev.backends.cpu.plugin", "anydev.backends.no_such_backend.plugin"),
                        entry_point_group=None)
    rows = {row.name: row for row in describe_backends(registry)}
    broken = rows["no_such_backend"]
    assert broken.available is False
    assert "ModuleNotFoundError" in broken.reason
    assert rows["cpu"].available is True
    assert "the plugin is broken: ModuleNotFoundError" in format_table(list(rows.values()))


def test_a_freshly_scaffolded_backend_is_a_row_with_the_reason_and_the_table_still_prints(clean_env, tmp_path):
    """`anydev new-backend` then `anydev list-backends`: the skeleton's device_count is a stub that
    raises; the listing still prints every row, the skeleton's saying why it is not available."""
    from dist_info import write_dist_info

    from anydev.cli import scaffold

    root = scaffold.new_backend("stubby", tmp_path / "anydev-stubby")
    write_dist_info(root, into=root)
    env = dict(clean_env, PYTHONPATH=os.pathsep.join(filter(None, [str(root), clean_env.get("PYTHONPATH")])))
    out = _run([sys.executable, "-m", "anydev", "list-backends"], env)
    status = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if not line.startswith(" ")}
    assert status["stubby"] == "no" and status["cpu"] == "yes", out
    assert "why: loaded, but device_count() is still a stub (a new-backend skeleton): NotSupportedError: " \
           "device_count is not implemented yet" in out
    rows = {row["name"]: row for row in json.loads(_run([sys.executable, "-m", "anydev", "list-backends", "--json"], env))}
    assert rows["stubby"]["available"] is False and rows["stubby"]["device_count"] is None
    assert rows["moore"]["reason"].startswith("libmusart not found")  # the other rows are all there


def test_a_backend_whose_device_count_fails_is_a_row_with_the_error(monkeypatch):
    import types

    from anydev.backends.cpu.runtime import CpuRuntime
    from anydev.plugin_api import CONTRACT_VERSION, BackendPlugin, RuntimeCallError, hookimpl

    class FailingRuntime(CpuRuntime):
        name = "failing"

        def device_count(self) -> int:
            raise RuntimeCallError("failing", "xyzGetDeviceCount", 3, "xyzErrorInitializationError", "driver not loaded")

    module = types.ModuleType("failing_backend_for_test.plugin")
    module.anydev_backends = hookimpl(lambda: [BackendPlugin(name="failing", contract_version=CONTRACT_VERSION,
                                                             load=FailingRuntime)])
    monkeypatch.setitem(sys.modules, module.__name__, module)
    registry = Registry(builtin_modules=("anydev.backends.cpu.plugin", module.__name__), entry_point_group=None)
    rows = {row.name: row for row in describe_backends(registry)}
    assert rows["failing"].available is False and rows["failing"].device_count is None
    assert rows["failing"].reason.startswith("loaded, but device_count() failed: RuntimeCallError")
    assert "driver not loaded" in format_table(list(rows.values())) and rows["cpu"].available


# Python run with the serving libraries made unimportable (as on a machine where only the engine's
# dependencies were installed), then the CLI with the arguments in argv[1:].
WITHOUT_SERVING = ("import sys\n"
                   "for name in ('fastapi', 'uvicorn', 'prometheus_client'):\n"
                   "    sys.modules[name] = None\n"
                   "from anydev.cli.commands import main\n"
                   "raise SystemExit(main(sys.argv[1:]))\n")


def test_list_backends_needs_no_serving_libraries(clean_env):
    """Only `anydev serve` needs fastapi, uvicorn and prometheus-client: the other commands work without them."""
    rows = json.loads(_run([sys.executable, "-c", WITHOUT_SERVING, "list-backends", "--json"], clean_env))
    assert {row["name"] for row in rows} >= {"cpu", "nvidia"}, rows


def test_serve_without_serving_libraries_says_what_to_install(clean_env):
    result = subprocess.run([sys.executable, "-c", WITHOUT_SERVING, "serve", "--device", "cpu"], env=clean_env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "error: anydev serve needs fastapi, uvicorn and prometheus-client" in result.stderr, result.stderr
    assert "pip install" in result.stderr and "Traceback" not in result.stderr, result.stderr
