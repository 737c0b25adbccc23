"""The engine core in its own process, and what happens when it fails: killed under load (SIGKILL),
or a step that raises. Every client gets an answer or an error (an error event and [DONE] on a
stream, 503 otherwise, never a 500), /health says 503, the server exits non-zero, nothing it started
is left running, and its port is free again."""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from starlette.testclient import TestClient

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.serving import ServerLimits, create_app
from process_tree import descendants, still_running
from serve_support import MODEL, Server, request

HEADERS = {"Content-Type": "application/json"}


def ask(port: int, stream: bool, outcome: list, index: int) -> None:
    """A long request; ``outcome[index]``: ("answer", text) or ("error", status, last events)."""
    body = json.dumps({"model": MODEL, "prompt": f"the device {index}", "max_tokens": 900, "ignore_eos": True,
                       "stream": stream, **({"stream_options": {"include_usage": True}} if stream else {})}).encode()
    try:
        status, _, text = request(f"http://127.0.0.1:{port}/v1/completions", "POST", body, HEADERS, timeout=60)
    except (OSError, http.client.HTTPException, ValueError) as exc:   # cut mid-answer (a chunk's size half read)
        outcome[index] = ("lost", repr(exc))
        return
    outcome[index] = (time.monotonic(), status, text)


def test_sigkill_of_the_engine_core_under_load_ends_every_request_and_the_server():
    srv = Server("--max-model-len", "1024")
    core_pid = int(re.search(r"engine core pid (\d+)", srv.output()).group(1))
    started = descendants(srv.proc.pid)
    assert core_pid in started
    outcome: list = [None] * 6
    clients = [threading.Thread(target=ask, args=(srv.port, i % 2 == 0, outcome, i)) for i in range(6)]
    for client in clients:
        client.start()
    try:
        assert srv.wait_for_metric("anydev_requests_running", lambda v: v >= 6) >= 6
        os.kill(core_pid, signal.SIGKILL)
        killed = time.monotonic()
        for client in clients:
            client.join(timeout=60)
        code = srv.proc.wait(timeout=60)           # it exits by itself: no SIGTERM sent
    finally:
        for client in clients:
            client.join(timeout=1)
        srv.stop()
    out = srv.output()
    for i, result in enumerate(outcome):
        assert result is not None and result[0] != "lost", (i, result, out)
        done_at, status, text = result
        assert done_at - killed < 5, (i, done_at - killed)
        if i % 2 == 0:                               # streamed: events, an error event, then [DONE]
            assert status == 200, text
            events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
            assert events[-1] == "[DONE]", events[-3:]
            error = json.loads(events[-2])["error"]
            assert error["type"] == "server_error" and "engine core" in error["message"], error
        else:
            assert status == 503, text
            assert "killed by signal 9" in json.loads(text)["error"]["message"]
    assert code != 0, out
    assert "killed by signal 9" in out
    assert not still_running(started), out
    with socket.socket() as s:                       # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", srv.port))


def test_sigterm_stops_the_engine_core_too():
    srv = Server("--max-model-len", "256")
    started = descendants(srv.proc.pid)
    code, out = srv.stop()
    assert code == 0, out
    assert re.search(r"stopped with 0 of \d+ KV blocks in use, 0 requests running and 0 waiting", out), out
    assert not still_running(started), out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_whole_process_group_drains_like_one_to_the_server(signum):
    """Ctrl-C in a terminal, or a supervisor's stop, signals every process of the group: the engine core
    is not among them (it follows its front ends), so the server drains and stops it as for a signal
    to the server alone."""
    srv = Server("--max-model-len", "256", own_group=True)
    started = descendants(srv.proc.pid)
    os.killpg(srv.proc.pid, signum)
    code = srv.proc.wait(timeout=120)
    out = srv.output()
    assert code == 0, out
    assert re.search(r"stopped with 0 of \d+ KV blocks in use, 0 requests running and 0 waiting", out), out
    assert "killed by signal" not in out and "Traceback" not in out, out
    assert not still_running(started), out


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=1024, use_graphs=False)) as engine:
        yield engine


def test_a_step_that_raises_ends_streams_with_an_error_then_503s(engine, monkeypatch):
    """The core on a thread over an engine whose 5th step raises: the stream in flight gets an
    error event naming the failure and [DONE]; then /health, a whole answer and a new stream all
    get 503 (never 500)."""
    real_step, steps = engine.step, []

    def failing_step():
        steps.append(1)
        if len(steps) == 5:
            raise RuntimeError("device fault (injected)")
        return real_step()

    monkeypatch.setattr(engine, "step", failing_step)
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 50, "ignore_eos": True}
    with TestClient(create_app(engine, MODEL, ServerLimits())) as api:
        with api.stream("POST", "/v1/completions", json={**body, "stream": True}) as reply:
            assert reply.status_code == 200
            events = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["type"] == "server_error" and "device fault (injected)" in error["message"]
        assert len(events) - 2 <= 4                     # the tokens of the steps before it, then the error
        health = api.get("/health")
        assert health.status_code == 503 and "device fault" in health.json()["error"]["message"]
        for stream in (False, True):
            reply = api.post("/v1/completions", json={**body, "stream": stream})
            assert reply.status_code == 503 and reply.json()["error"]["type"] == "server_error", reply.text
    monkeypatch.undo()
    for seq in list(engine.scheduler.running) + list(engine.scheduler.waiting):
        engine.abort(seq)


def test_two_front_ends_share_the_core_and_the_port_and_one_dying_spares_the_other(engine):
    """--api-server-count 2: answers equal offline greedy generation; then front end 0 is killed
    (SIGKILL) while long streams run: the streams it held are cut, the others finish whole, the
    core aborts its requests (no KV block stays in use) and the server answers on, on the same port."""
    srv = Server("--max-model-len", "1024", "--api-server-count", "2")
    deadline = time.monotonic() + 180
    while "2 front ends serving" not in srv.output() and time.monotonic() < deadline:   # not only the first
        time.sleep(0.3)
    front_ends = [int(pid) for pid in re.findall(r"anydev-front-end-\d pid (\d+)", srv.output())]
    assert len(front_ends) == 2, srv.output()
    started = descendants(srv.proc.pid)
    tokenizer = engine.checkpoint.tokenizer
    prompts = [f"the device {i} and the model" for i in range(8)]
    expected = [o.text for o in engine.generate_ids([tokenizer.encode(p, add_special_tokens=True) for p in prompts],
                                                     SamplingParams(max_new_tokens=12))]
    client = srv.client()
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda p: client.completions.create(model=MODEL, prompt=p, max_tokens=12,
                                                                        temperature=0).choices[0].text, prompts))
        assert answers == expected

        outcome: list = [None] * 4
        streams = [threading.Thread(target=ask, args=(srv.port, True, outcome, i)) for i in range(4)]
        for stream in streams:
            stream.start()
        assert srv.wait_for_metric("anydev_requests_running", lambda v: v >= 4) >= 4
        os.kill(front_ends[0], signal.SIGKILL)
        for stream in streams:
            stream.join(timeout=120)
        for result in outcome:
            assert result is not None
            if result[0] != "lost":                 # not cut with front end 0: served whole
                events = [line[6:] for line in result[2].splitlines() if line.startswith("data: ")]
                assert result[1] == 200 and events[-1] == "[DONE]" and "error" not in events[-2], events[-2:]
                assert json.loads(events[-2])["usage"]["completion_tokens"] == 900
        assert srv.wait_for_metric("anydev_kv_blocks_used", lambda v: v == 0) == 0
        assert srv.metrics()["anydev_requests_running"] == 0
        with ThreadPoolExecutor(8) as pool:
            again = list(pool.map(lambda p: client.completions.create(model=MODEL, prompt=p, max_tokens=12,
                                                                      temperature=0).choices[0].text, prompts))
        assert again == expected and srv.proc.poll() is None
        assert "frontend-0 exited; its requests are aborted" in srv.output()
    finally:
        srv.stop()
    assert not still_running(started), srv.output()
