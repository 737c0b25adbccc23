"""benchmarks/gpu_record.sh goes on past a failing step and always writes its archive: it sources
scripts/device_setup.sh, which must leave the caller's shell options alone (a `set -e` leaking into the
record would make one failure lose every later step). Run here with fake ``python3`` and ``nvidia-smi``
on PATH that log each call."""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [[ -n "${HANG_ON:-}" && "$*" == *"$HANG_ON"* ]]; then sleep 300; fi
if [[ -n "${FAIL_ON:-}" && "$*" == *"$FAIL_ON"* ]]; then echo "fake failure: $*" >&2; exit 3; fi
echo "fake ok: $*"
"""
FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
echo "GPU 0: fake"; echo "GPU 1: fake"
"""


def record(tmp_path: Path, fail_on: str, steps: str | None = None, **extra_env) -> tuple[list[str], Path, subprocess.CompletedProcess]:
    root = tmp_path / "repo"
    (root / "benchmarks").mkdir(parents=True)
    (root / "scripts").mkdir()
    shutil.copy(REPO / "benchmarks" / "gpu_record.sh", root / "benchmarks")
    shutil.copy(REPO / "benchmarks" / "init_record.sh", root / "benchmarks")
    shutil.copy(REPO / "scripts" / "device_setup.sh", root / "scripts")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", FAKE_PYTHON), ("nvidia-smi", FAKE_NVIDIA_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "FAIL_ON": fail_on,
           "OUT": str(tmp_path / "out")}
    if steps is not None:
        env["STEPS"] = steps
    env.update(extra_env)
    done = subprocess.run(["bash", "benchmarks/gpu_record.sh"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    return calls.read_text().splitlines(), tmp_path / "out" / "gpu-record.tgz", done


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
@pytest.mark.parametrize("fail_on", ["pip install", "overhead_bench.py", "make_random_model.py", "--tp 1 --model",
                                     "decode_bench.py"])
def test_every_step_runs_and_the_archive_is_written_when_a_step_fails(tmp_path, fail_on):
    calls, archive, done = record(tmp_path, fail_on)
    assert any(fail_on in c for c in calls), f"the fake never saw the failing step: {calls}"
    for later in ("list-backends", "anydev.conformance", "overhead_bench.py", "test_infer.py", "graph_smoke.py",
                  "init_bench.py --device nvidia --tp 1 ", "init_bench.py --device nvidia --tp 2 ", "decode_bench.py",
                  "step_profile.py"):
        assert any(later in c for c in calls), f"step '{later}' did not run after '{fail_on}' failed:\n{done.stderr}"
    assert archive.is_file(), f"no archive written:\n{done.stdout}\n{done.stderr}"
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        assert {"env.txt", "conformance.txt", "overhead.txt", "infer.txt", "init.txt", "decode.txt",
                "decode4k.txt", "prefill.txt", "profile.txt", "steps.txt"} <= names, names
        steps = tar.extractfile("steps.txt").read().decode()
    failed = [line for line in steps.splitlines() if not line.startswith("0 ")]
    # init_record.sh is one step of the record: a failure inside it shows as that step failing
    assert failed and all(fail_on in line or "device_setup" in line or "init_record" in line for line in failed), steps


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_steps_selects_what_runs(tmp_path):
    calls, archive, done = record(tmp_path, "never", steps="decode4k prefill")
    benches = [c for c in calls if "benchmarks/" in c or "anydev.conformance" in c or "test_infer" in c]
    assert len(benches) == 2 and all("decode_bench.py" in c for c in benches), benches
    assert "--contexts 4096" in benches[0] and "--prefill-len 8192" in benches[1]
    with tarfile.open(archive) as tar:
        assert {"decode4k.txt", "prefill.txt"} <= set(tar.getnames())
        assert "conformance.txt" not in tar.getnames()


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_device_setup_run_directly_still_fails_on_a_failed_install(tmp_path):
    _, _, _ = record(tmp_path, "never")   # builds the fake repo and PATH
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "CALLS": str(tmp_path / "c"),
           "FAIL_ON": "pip install"}
    done = subprocess.run(["bash", "scripts/device_setup.sh"], cwd=tmp_path / "repo", env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "failed" in done.stderr


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_pp_step_runs_the_send_recv_group_and_test_infer_at_pp_2_on_threads_and_processes(tmp_path):
    calls, archive, _ = record(tmp_path, "never", steps="pp")
    infer = [c for c in calls if "test_infer.py" in c and "--pp 2" in c and "--model" not in c]
    assert any("--executor" not in c for c in infer) and any("--executor mp" in c for c in infer), infer
    assert any("anydev.conformance" in c and "-k send_recv" in c for c in calls), calls
    with tarfile.open(archive) as tar:
        assert "pp.txt" in tar.getnames()


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_a_step_past_its_limit_is_aborted_and_the_next_steps_run(tmp_path):
    calls, archive, done = record(tmp_path, "never", steps="kernels overhead", HANG_ON="kernel_bench.py",
                                  STEP_TIMEOUT="2")
    assert any("overhead_bench.py" in c for c in calls), calls   # the step after the hung one ran
    with tarfile.open(archive) as tar:
        steps = tar.extractfile("steps.txt").read().decode()
    assert any(line.startswith("124 ") and "kernel_bench.py" in line for line in steps.splitlines()), steps


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_a_term_during_a_hung_step_ends_the_record_at_once_and_writes_the_archive(tmp_path):
    """An outer limit (timeout -s TERM) must not wait for the running step's own limit."""
    import time

    record(tmp_path, "never", steps="none")   # builds the fake repo and PATH
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "CALLS": str(tmp_path / "c"),
           "OUT": str(tmp_path / "out2"), "STEPS": "kernels overhead", "HANG_ON": "kernel_bench.py",
           "STEP_TIMEOUT": "300"}
    script = subprocess.Popen(["bash", "benchmarks/gpu_record.sh"], cwd=tmp_path / "repo", env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (tmp_path / "c").exists() or "kernel_bench.py" not in (tmp_path / "c").read_text():
        assert time.monotonic() < deadline, "the hung step never started"
        time.sleep(0.1)
    script.terminate()
    try:
        script.wait(timeout=30)   # a hang detector: the step's own limit is 300 s
    except subprocess.TimeoutExpired:
        script.kill()
        pytest.fail("gpu_record.sh did not end on TERM while a step was running")
    assert script.returncode == 143
    assert (tmp_path / "out2" / "gpu-record.tgz").is_file()
    assert "overhead_bench.py" not in (tmp_path / "c").read_text()
