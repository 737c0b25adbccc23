"""The server's log lines: an access line per request (method, path, status, seconds) and a stats
line every --log-stats-interval seconds (running and waiting requests, tokens/s, KV cache use), each
turned off by its flag (--disable-log-requests, --disable-log-stats: vLLM's)."""
from __future__ import annotations

import re
import time

import openai
import pytest
from starlette.testclient import TestClient

from anydev.core import EngineConfig, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.serving import create_app
from anydev.serving.request_log import AccessLog, StatsLog
from serve_support import MODEL, Server

ACCESS = re.compile(r'^anydev serve: (\S+) "(GET|POST) (\S+) HTTP/1\.1" (\d{3}) (\d+\.\d{3}) s$')
STATS = re.compile(r"^anydev serve: stats: running (\d+) reqs, waiting (\d+) reqs, prompt (\d+\.\d) tokens/s, "
                   r"generation (\d+\.\d) tokens/s, KV cache (\d+\.\d)% used, prefix cache hit rate (\d+\.\d)%$")


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=128, use_graphs=False)) as engine:
        yield engine


def test_every_request_gets_one_access_line_with_its_status_and_duration(engine):
    lines = []
    app = create_app(engine, MODEL)
    app.add_middleware(AccessLog, write=lines.append)
    with TestClient(app) as http:
        api = openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0)
        api.models.list()
        with pytest.raises(openai.NotFoundError):
            api.completions.create(model="nope", prompt="hi", max_tokens=2)
        list(api.completions.create(model=MODEL, prompt="hi", max_tokens=4, stream=True))
        http.post("/v1/completions", content=b"{not json")
        http.get("/no/such/route")
    parsed = [ACCESS.match(line) for line in lines]
    assert all(parsed), lines
    assert [(m[2], m[3], m[4]) for m in parsed] == [
        ("GET", "/v1/models", "200"), ("POST", "/v1/completions", "404"), ("POST", "/v1/completions", "200"),
        ("POST", "/v1/completions", "400"), ("GET", "/no/such/route", "404")]
    assert all(float(m[5]) >= 0 for m in parsed)


def test_the_stats_line_comes_every_interval_while_there_is_work_and_says_its_tokens(engine):
    lines = []
    app = create_app(engine, MODEL)
    with TestClient(app) as http:
        state = app.state.anydev
        stats = StatsLog(state.engine, state.metrics, 0.2, write=lines.append).start()
        try:
            time.sleep(0.7)
            idle_before = list(lines)
            api = openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0)
            for _ in range(3):
                api.completions.create(model=MODEL, prompt="hello world", max_tokens=16, temperature=0)
            time.sleep(0.7)
        finally:
            stats.stop()
    assert idle_before == []                          # quiet while idle
    parsed = [STATS.match(line) for line in lines]
    assert parsed and all(parsed), lines
    assert any(float(m[4]) > 0 for m in parsed) and any(float(m[3]) > 0 for m in parsed)
    assert all(0.0 <= float(m[5]) <= 100.0 for m in parsed)
    assert float(parsed[-1][4]) == 0.0 and parsed[-1][1] == "0"   # one idle line after the work, then quiet


def _complete(server: Server) -> None:
    server.client().completions.create(model=MODEL, prompt="hello world", max_tokens=8, temperature=0)


def test_serve_writes_both_lines_and_the_flags_turn_them_off():
    logged = Server("--max-model-len", "128", "--log-stats-interval", "0.5")
    try:
        _complete(logged)
        time.sleep(1.5)
    finally:
        code, out = logged.stop()
    assert code == 0, out
    lines = out.splitlines()
    assert any((m := ACCESS.match(line)) and m[3] == "/v1/completions" and m[4] == "200" for line in lines), out
    assert any((m := STATS.match(line)) and float(m[4]) > 0 for line in lines), out

    quiet = Server("--max-model-len", "128", "--log-stats-interval", "0.5", "--disable-log-requests",
                   "--disable-log-stats")
    try:
        _complete(quiet)
        time.sleep(1.5)
    finally:
        code, out = quiet.stop()
    assert code == 0, out
    assert not any(ACCESS.match(line) or STATS.match(line) for line in out.splitlines()), out
