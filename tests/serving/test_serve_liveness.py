"""An engine core that stops stepping while it has work: stopped (SIGSTOP) in a process of its own,
or stuck in a step on a thread. /health turns 503, the requests waiting for it get 503 after
--engine-stall-timeout, a core that steps again is healthy and serves again; an idle core that does
not step is not judged."""
from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pytest
from starlette.testclient import TestClient

from anydev.core import EngineConfig, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.serving import ServerLimits, create_app
from process_tree import descendants
from serve_support import MODEL, Server, request

HEADERS = {"Content-Type": "application/json"}


def completion(port: int, stream: bool, max_tokens: int = 900) -> tuple[int, str]:
    body = json.dumps({"model": MODEL, "prompt": "the device", "max_tokens": max_tokens, "ignore_eos": True,
                       "stream": stream}).encode()
    status, _, text = request(f"http://127.0.0.1:{port}/v1/completions", "POST", body, HEADERS, timeout=60)
    return status, text


def wait_until(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_stopped_engine_core_turns_health_503_answers_its_requests_503_and_serves_again_once_resumed():
    srv = Server("--max-model-len", "1024", "--engine-stall-timeout", "8")
    core_pid = int(re.search(r"engine core pid (\d+)", srv.output()).group(1))
    assert core_pid in descendants(srv.proc.pid)
    try:
        os.kill(core_pid, signal.SIGSTOP)            # idle: nothing waits for it, so nothing to judge
        time.sleep(6)                                # past the 5 s health limit
        assert srv.healthy(), srv.output()
        os.kill(core_pid, signal.SIGCONT)

        outcome: list = [None] * 4

        def ask(i: int) -> None:
            outcome[i] = completion(srv.port, stream=i % 2 == 0)

        clients = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for client in clients:
            client.start()
        assert srv.wait_for_metric("anydev_requests_running", lambda v: v >= 4) >= 4
        os.kill(core_pid, signal.SIGSTOP)
        assert wait_until(lambda: not srv.healthy(), 30), srv.output()
        unanswered_at_503 = sum(result is None for result in outcome)
        health = json.loads(request(f"{srv.url}/health")[2])["error"]["message"]
        for client in clients:
            client.join(timeout=60)
        refused = completion(srv.port, stream=False, max_tokens=4)   # still stopped: refused at once
        os.kill(core_pid, signal.SIGCONT)
        assert wait_until(srv.healthy, 30), srv.output()
        again = completion(srv.port, stream=False, max_tokens=4)
        blocks_after = srv.wait_for_metric("anydev_kv_blocks_used", lambda v: v == 0)
    finally:
        os.kill(core_pid, signal.SIGCONT)
        code, out = srv.stop()
    assert unanswered_at_503 == 4, outcome          # /health said 503 before the stall timeout answered them
    assert "has work but has not stepped" in health, health
    for i, result in enumerate(outcome):
        assert result is not None, (i, out)
        status, text = result
        if i % 2 == 0:                               # streamed: tokens, an error event, then [DONE]
            events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
            assert status == 200 and events[-1] == "[DONE]", events[-3:]
            error = json.loads(events[-2])["error"]
            assert error["type"] == "server_error" and "--engine-stall-timeout" in error["message"], error
        else:
            assert status == 503 and "has not stepped" in json.loads(text)["error"]["message"], text
    assert refused[0] == 503 and "has not stepped" in refused[1], refused
    assert again[0] == 200 and json.loads(again[1])["usage"]["completion_tokens"] == 4, again
    assert blocks_after == 0                         # the ended requests were aborted in the core once it ran
    assert "has not stepped for" in out and "steps again after" in out, out
    assert code == 0 and "Traceback" not in out, out


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=256, use_graphs=False)) as engine:
        yield engine


def test_a_step_stuck_on_the_core_thread_is_a_stall_until_it_returns(engine, monkeypatch):
    """A step that blocks (a device call that does not return): /health 503, the request 503 after
    the stall timeout (1 s here); once the step returns, /health 200 and requests are served."""
    real_step, release, entered = engine.step, threading.Event(), threading.Event()

    def stuck_step():
        if not release.is_set():
            entered.set()
            release.wait(60)
        return real_step()

    monkeypatch.setattr(engine, "step", stuck_step)
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 4, "ignore_eos": True}
    with TestClient(create_app(engine, MODEL, ServerLimits())) as api:
        api.app.state.anydev.engine.stall_timeout = 1.0
        assert api.get("/health").status_code == 200
        reply = api.post("/v1/completions", json=body)
        assert entered.is_set()
        assert reply.status_code == 503 and "has not stepped" in reply.json()["error"]["message"], reply.text
        assert api.get("/health").status_code == 503
        release.set()
        assert wait_until(lambda: api.get("/health").status_code == 200, 30)
        reply = api.post("/v1/completions", json=body)
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4, reply.text
