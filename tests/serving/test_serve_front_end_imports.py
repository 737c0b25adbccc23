"""``anydev serve``'s front ends load no torch (nor Triton or transformers): only the engine core's process
does, so that the front end starts in the time its own imports take, beside the core."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_support import MODEL, Server, free_port

HEAVY = ("torch", "triton", "transformers")

#: ``anydev serve`` in this process (the front end), and a thread that, once /health answers 200, asks
#: for a completion and a chat answer, writes the heavy modules this process holds to a file, then stops it.
DRIVER = """
import json, os, signal, sys, threading, time, urllib.request

PORT, MODEL, HEAVY, REPORT = int(sys.argv[1]), sys.argv[2], sys.argv[3].split(","), sys.argv[4]

def post(path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.status

def probe():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    statuses = [post("/v1/completions", {"model": MODEL, "prompt": "hello", "max_tokens": 2, "stream": True}),
                post("/v1/chat/completions", {"model": MODEL, "max_tokens": 2,
                                              "messages": [{"role": "user", "content": "hi"}]})]
    with open(REPORT, "w") as report:
        json.dump({"statuses": statuses, "heavy": [m for m in HEAVY if m in sys.modules]}, report)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=probe, daemon=True).start()
from anydev.cli.commands import main
sys.exit(main(["serve", "--device", "cpu", "--host", "127.0.0.1", "--port", str(PORT), "--max-model-len", "256"]))
"""


def test_the_front_end_answers_without_importing_torch_triton_or_transformers(tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(free_port()), MODEL, ",".join(HEAVY), str(report)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0 and report.exists(), done.stdout + done.stderr
    assert json.loads(report.read_text()) == {"statuses": [200, 200], "heavy": []}


def _maps_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps (Linux)")
def test_two_front_ends_and_their_supervisor_map_no_torch_and_the_engine_core_does():
    srv = Server("--max-model-len", "256", "--api-server-count", "2")
    try:
        deadline = time.monotonic() + 180
        while "2 front ends serving" not in srv.output() and time.monotonic() < deadline:
            time.sleep(0.3)
        out = srv.output()
        front_ends = [int(pid) for pid in re.findall(r"anydev-front-end-\d pid (\d+)", out)]
        core = int(re.search(r"engine core pid (\d+)", out).group(1))
        assert len(front_ends) == 2 and "2 front ends serving" in out, out
        answer = srv.client().completions.create(model=MODEL, prompt="hello", max_tokens=2, temperature=0)
        assert answer.choices[0].text
        assert [_maps_torch(pid) for pid in (srv.proc.pid, *front_ends)] == [False, False, False]
        assert _maps_torch(core)
    finally:
        srv.stop()
