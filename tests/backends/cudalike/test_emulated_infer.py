"""``examples/test_infer.py --device moore|metax --tp 2`` end to end on the emulated runtimes, run the
way the README says (``python -m anydev.conformance.emulated VENDOR -- COMMAND``): the real plugin
code, its MCCL all-reduces between the two ranks, and greedy tokens equal to the cpu reference."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anydev.conformance.emulated import main as emulated_main

REPO = Path(__file__).resolve().parents[3]
TEST_INFER = REPO / "examples" / "test_infer.py"
VARIABLES = {"moore": ("ANYDEV_MUSART_LIBRARY", "ANYDEV_MUSA_MCCL_LIBRARY"),
             "metax": ("ANYDEV_MCRUNTIME_LIBRARY", "ANYDEV_MACA_MCCL_LIBRARY")}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler (gcc) to build the emulated runtimes")
    return tmp_path_factory.mktemp("emulated")


@pytest.mark.parametrize("vendor", ["moore", "metax"])
def test_test_infer_tp2_on_the_emulated_runtime_equals_the_cpu_reference(vendor, build_dir):
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES[vendor]}  # only the command sets them
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "anydev.conformance.emulated", vendor, "--dir", str(build_dir), "--",
         sys.executable, str(TEST_INFER), "--device", vendor, "--tp", "2", "--max-new-tokens", "12"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"device: {vendor} (emulated runtime) x 2 rank(s)" in result.stdout, result.stdout
    assert f"tokens match the cpu reference: yes (greedy, float32: {vendor} tp=2 vs cpu tp=1)" in result.stdout
    assert "not real hardware" in result.stderr  # the wrapper says what it is running on


def test_test_infer_pp2_on_the_emulated_mccl_send_recv_equals_the_cpu_reference(build_dir):
    """Pipeline stages through the emulated MCCL's mcclSend/mcclRecv (the plugin's cffi bindings)."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES["moore"]}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "anydev.conformance.emulated", "moore", "--dir", str(build_dir), "--",
         sys.executable, str(TEST_INFER), "--device", "moore", "--pp", "2", "--batch-size", "3", "--max-new-tokens", "12"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "device: moore (emulated runtime) x 2 rank(s) (threads, tp 1 x pp 2, eager)" in result.stdout, result.stdout
    assert "tokens match the cpu reference: yes (greedy, float32: moore tp=1 pp=2 vs cpu tp=1)" in result.stdout


def test_without_a_command_it_prints_the_exports(build_dir, capsys):
    assert emulated_main(["moore,metax", "--dir", str(build_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# anydev emulated runtime") and "not real hardware" in lines[0]
    exported = dict(line.removeprefix("export ").split("=", 1) for line in lines[1:])
    assert exported.pop("ANYDEV_CUDALIKE_VARIANTS") == "anydev.conformance.emulated_runtime"   # registers its runtime
    assert sorted(exported) == sorted(VARIABLES["moore"] + VARIABLES["metax"])
    assert all(Path(path).is_file() and Path(path).is_relative_to(build_dir) for path in exported.values())


def test_an_unknown_vendor_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        emulated_main(["nvidia"])
    assert exit_info.value.code == 2 and "choose from moore, metax" in capsys.readouterr().err


def test_conformance_engine_groups_run_on_the_emulated_plugins_without_a_skip(build_dir, tmp_path):
    """The moore and metax matrix rows: parallel init and inference run (and pass) on the emulated runtimes."""
    report_file = tmp_path / "emulated.json"
    result = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "moore,metax", "--emulated", "moore,metax",
         "--tp", "2", "--report", str(report_file), "--", "-q", "-k", "parallel_init or inference"],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    checks = json.loads(report_file.read_text())["checks"]
    for vendor in ("moore", "metax"):
        groups = {(c["group"], c["status"]) for c in checks if c["backend"] == vendor}
        assert groups == {("parallel_init", "pass"), ("inference", "pass")}, (vendor, sorted(groups))
