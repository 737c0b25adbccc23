"""A rank of a served engine dies (SIGKILL of a rank process, --tp 2 --executor mp): the request in
flight is answered 503 naming the rank, the server exits non-zero, and its log says so in one line
with no Python traceback."""
from __future__ import annotations

import json
import os
import re
import signal
import threading

from process_tree import descendants, still_running
from serve_support import MODEL, Server, request


def rank_processes(core_pid: int) -> list[int]:
    found = []
    for pid in descendants(core_pid):
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                if "rank_process" in f.read():
                    found.append(pid)
        except OSError:
            continue
    return sorted(found)


def test_a_killed_rank_is_one_line_in_the_server_log_and_no_traceback():
    srv = Server("--max-model-len", "1024", "--tp", "2", "--executor", "mp")
    core_pid = int(re.search(r"engine core pid (\d+)", srv.output()).group(1))
    started = descendants(srv.proc.pid)
    [rank_1] = rank_processes(core_pid)              # rank 0 runs in the core itself
    outcome: list = []
    body = json.dumps({"model": MODEL, "prompt": "the device", "max_tokens": 900, "ignore_eos": True}).encode()
    asking = threading.Thread(target=lambda: outcome.append(request(
        f"{srv.url}/v1/completions", "POST", body, {"Content-Type": "application/json"}, timeout=60)))
    asking.start()
    try:
        assert srv.wait_for_metric("anydev_requests_running", lambda v: v >= 1) >= 1
        os.kill(rank_1, signal.SIGKILL)
        asking.join(timeout=60)
        code = srv.proc.wait(timeout=60)
    finally:
        asking.join(timeout=1)
        srv.stop()
    out = srv.output()
    status, _, text = outcome[0]
    assert status == 503 and "rank 1 failed" in json.loads(text)["error"]["message"], text
    assert code == 2, out
    assert "Traceback" not in out, out
    named = [line for line in out.splitlines() if "rank 1 failed" in line]
    assert len(named) == 1 and named[0].startswith("error: ") and "SIGKILL" in named[0], out
    assert not still_running(started), out
