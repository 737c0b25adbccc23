"""A Qwen3-MoE checkpoint through ``examples/test_infer.py --device moore|metax --tp 2`` on the emulated
runtimes (``python -m anydev.conformance.emulated VENDOR -- COMMAND``): the real plugin code and its
MCCL all-reduces of the experts' partial sums, the text equal to the cpu backend's at one rank."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints import write_hf_checkpoint

REPO = Path(__file__).resolve().parents[3]
TEST_INFER = REPO / "examples" / "test_infer.py"
VARIABLES = {"moore": ("ANYDEV_MUSART_LIBRARY", "ANYDEV_MUSA_MCCL_LIBRARY"),
             "metax": ("ANYDEV_MCRUNTIME_LIBRARY", "ANYDEV_MACA_MCCL_LIBRARY")}
ARGS = ["--dtype", "float32", "--max-new-tokens", "10", "--prompt", "Hello world", "--no-chat-template"]


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("moe") / "qwen3_moe", arch="qwen3_moe")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler (gcc) to build the emulated runtimes")
    return tmp_path_factory.mktemp("emulated")


def output_text(stdout: str) -> str:
    match = re.search(r"^--- output 0 .*?---\n(.*?)\n(?:start-up timeline|prefill:)", stdout, re.S | re.M)
    assert match, stdout
    return match.group(1)


@pytest.mark.parametrize("vendor", ["moore", "metax"])
def test_qwen3_moe_at_tp2_on_the_emulated_runtime_equals_the_cpu_backend(vendor, moe_dir, build_dir):
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES[vendor]}
    env["OMP_NUM_THREADS"] = "1"
    cpu = subprocess.run([sys.executable, str(TEST_INFER), "--model", str(moe_dir), "--device", "cpu", *ARGS],
                         env=env, capture_output=True, text=True, timeout=300)
    assert cpu.returncode == 0, (cpu.stdout + cpu.stderr)[-4000:]
    emulated = subprocess.run(
        [sys.executable, "-m", "anydev.conformance.emulated", vendor, "--dir", str(build_dir), "--",
         sys.executable, str(TEST_INFER), "--model", str(moe_dir), "--device", vendor, "--tp", "2", *ARGS],
        env=env, capture_output=True, text=True, timeout=600)
    assert emulated.returncode == 0, (emulated.stdout + emulated.stderr)[-4000:]
    assert f"device: {vendor} (emulated runtime) x 2 rank(s)" in emulated.stdout, emulated.stdout
    assert "qwen3_moe" in emulated.stdout
    assert output_text(emulated.stdout) == output_text(cpu.stdout)
