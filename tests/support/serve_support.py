"""``anydev serve`` in a subprocess on 127.0.0.1 for the serving tests, and what they share: raw HTTP
requests, the server's /metrics as numbers, and the record of hardening figures (tests/conftest.py
puts tests/support/ on sys.path)."""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import openai
from prometheus_client.parser import text_string_to_metric_families

MODEL = "anydev-demo"
KEY = "test-key-123"


def request(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None,
            timeout: float = 30) -> tuple[int, dict, str]:
    """(status, headers, text) of one HTTP request (the standard library's client)."""
    host, _, path = url.removeprefix("http://").partition("/")
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request(method, "/" + path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``anydev serve`` in a subprocess; its output goes to a file (a pipe nobody reads could fill and
    block it); :meth:`stop` sends SIGTERM and returns the exit code and the output."""

    def __init__(self, *args: str, key: str | None = None, env: dict | None = None, own_group: bool = False):
        """``own_group``: the server leads a process group of its own, as under a terminal or a supervisor
        that signals the whole group."""
        self.port = free_port()
        environment = dict(os.environ, OMP_NUM_THREADS="1")
        environment.pop("ANYDEV_API_KEY", None)
        environment.update(env or {})
        command = [sys.executable, "-m", "anydev", "serve", "--device", "cpu", "--port", str(self.port), *args]
        if key:
            command += ["--api-key", key]
        self.key = key
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(command, env=environment, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=own_group)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"anydev serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if request(f"{self.url}/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.proc.kill()
        raise RuntimeError("anydev serve did not become healthy within 180 s")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.key or "none", max_retries=0, timeout=120)

    def headers(self) -> dict:
        return {"Content-Type": "application/json", **({"Authorization": f"Bearer {self.key}"} if self.key else {})}

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics by name (labels joined in), e.g. 'anydev_kv_blocks_used'."""
        text = request(f"{self.url}/metrics", headers=self.headers())[2]
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
        return samples

    def wait_for_metric(self, name: str, predicate, seconds: float = 60) -> float:
        deadline = time.monotonic() + seconds
        while True:
            value = self.metrics().get(name, 0.0)
            if predicate(value) or time.monotonic() > deadline:
                return value
            time.sleep(0.2)

    def healthy(self) -> bool:
        return request(f"{self.url}/health")[0] == 200

    def proc_status(self, field: str) -> int:
        """A number from /proc/PID/status of the server, e.g. 'Threads' or 'VmRSS' (KiB)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            line = next(line for line in f if line.startswith(field + ":"))
        return int(line.split()[1])

    def open_files_once_served(self) -> int:
        """The server's open files after it has answered a completion: /health can answer while
        uvicorn still sets up its listening sockets, before the gated accept path holds their
        duplicates, so a count taken at /health 200 can be short of the steady one."""
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 1}).encode()
        status = request(f"{self.url}/v1/completions", "POST", body, {"content-type": "application/json"},
                         timeout=60)[0]
        assert status == 200, status
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def resources(self) -> dict:
        """What a leak would grow: the server's RSS, threads, open files, and the KV blocks in use."""
        return {"rss_mib": round(self.proc_status("VmRSS") / 1024, 1), "threads": self.proc_status("Threads"),
                "open_files": len(os.listdir(f"/proc/{self.proc.pid}/fd")),
                "kv_blocks_used": int(self.metrics()["anydev_kv_blocks_used"])}

    def stop(self, timeout: float = 60) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode, self.output()


class Figures:
    """The figures a hardening test records (load held, faults survived, inputs tried, 5xx seen,
    requests lost, resources at start and end): ``record(scenario, **numbers)``. When
    ``ANYDEV_SERVE_FIGURES`` names a file, the session writes them there as JSON at its end
    (benchmarks/serve_hardening.py runs the tests that way); otherwise they are only asserted on."""

    def __init__(self):
        self.scenarios: dict[str, dict] = {}

    def record(self, scenario: str, **numbers) -> None:
        self.scenarios.setdefault(scenario, {}).update(numbers)

    def write(self) -> None:
        path = os.environ.get("ANYDEV_SERVE_FIGURES")
        if path and self.scenarios:
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            target = f"{path}.{worker}" if worker else path
            with open(target, "w") as f:
                json.dump(self.scenarios, f, indent=2, sort_keys=True)


FIGURES = Figures()
