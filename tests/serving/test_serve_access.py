"""The server's access rules and limits, in process (FastAPI's test client over the app on the demo
engine): the key compared in constant time, /metrics behind the key only when asked, a warning for
binding beyond this machine without a key, each limit named in its error, and an OpenAPI schema that
describes the request bodies and every error answer."""
from __future__ import annotations

import hmac
import os
import subprocess
import sys

import pytest
from starlette.testclient import TestClient

from anydev.core import EngineConfig, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.serving import ServerLimits, create_app
from anydev.serving.server import exposure_warning

KEY = "s3cret-key-for-tests"
MODEL = "anydev-demo"


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=128, use_graphs=False)) as engine:
        yield engine


def client(engine, api_key=KEY, **limits) -> TestClient:
    return TestClient(create_app(engine, MODEL, ServerLimits(**limits), api_key))


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def test_the_key_is_compared_in_constant_time(engine, monkeypatch):
    calls = []

    def spy(a, b):
        calls.append((a, b))
        return compare(a, b)

    compare = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", spy)
    api = client(engine)
    assert api.get("/v1/models", headers=bearer("wrong")).status_code == 401
    assert api.get("/v1/models", headers=bearer(KEY)).status_code == 200
    assert api.get("/v1/models").status_code == 401
    assert calls == [(b"wrong", KEY.encode()), (KEY.encode(), KEY.encode()), (b"", KEY.encode())]


def test_a_prefix_or_extension_of_the_key_is_refused(engine):
    api = client(engine)
    for sent in (KEY[:-1], KEY + "x", KEY.upper(), f"Basic {KEY}"):
        headers = {"Authorization": sent} if sent.startswith("Basic") else bearer(sent)
        reply = api.get("/v1/models", headers=headers)
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"
        assert KEY not in reply.text


@pytest.mark.parametrize("need_key", [True, False])
def test_metrics_need_the_key_only_when_asked(engine, need_key):
    api = client(engine, metrics_need_key=need_key)
    assert api.get("/metrics").status_code == (401 if need_key else 200)
    reply = api.get("/metrics", headers=bearer(KEY))
    assert reply.status_code == 200 and "anydev_kv_blocks_used" in reply.text
    assert api.get("/health").status_code in (200, 503)      # open either way (503: no engine loop here)
    assert api.get("/health").status_code != 401


@pytest.mark.parametrize("host, key, warns", [
    ("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False), ("127.0.0.2", None, False),
    ("0.0.0.0", None, True), ("::", None, True), ("192.168.1.7", None, True), ("myhost.example", None, True),
    ("0.0.0.0", "k", False),
])
def test_binding_beyond_this_machine_without_a_key_warns(host, key, warns):
    warning = exposure_warning(host, key)
    assert bool(warning) == warns
    if warns:
        assert host in warning and "--api-key" in warning


def test_the_cli_warns_before_anything_binds_and_never_prints_the_key():
    """An unknown device stops `anydev serve` before it binds, after the exposure check."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("ANYDEV_API_KEY", None)
    base = [sys.executable, "-m", "anydev", "serve", "--device", "no-such-device", "--port", "1"]
    open_run = subprocess.run(base + ["--host", "0.0.0.0"], capture_output=True, text=True, timeout=120, env=env)
    assert open_run.returncode != 0 and "without --api-key" in open_run.stderr
    keyed = subprocess.run(base + ["--host", "0.0.0.0", "--api-key", KEY], capture_output=True, text=True,
                           timeout=120, env=env)
    assert keyed.returncode != 0 and "without --api-key" not in keyed.stderr
    assert KEY not in keyed.stdout + keyed.stderr


def test_each_limit_is_named_in_its_error(engine):
    api = client(engine, max_prompt_tokens=20, max_tokens=8, max_body_bytes=2000)
    headers = bearer(KEY)
    long_prompt = api.post("/v1/completions", headers=headers,
                           json={"model": MODEL, "prompt": "hello world " * 30, "max_tokens": 2})
    assert long_prompt.status_code == 400 and "--max-prompt-tokens" in long_prompt.json()["error"]["message"]
    many_tokens = api.post("/v1/completions", headers=headers, json={"model": MODEL, "prompt": "hi", "max_tokens": 9})
    assert many_tokens.status_code == 400 and "--max-tokens-limit" in many_tokens.json()["error"]["message"]
    both = api.post("/v1/chat/completions", headers=headers,
                    json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9,
                          "max_completion_tokens": 2})
    assert both.status_code == 400 and "--max-tokens-limit" in both.json()["error"]["message"]
    body = b'{"model": "anydev-demo", "prompt": "' + b"x" * 5000 + b'"}'
    sized = api.post("/v1/completions", headers={**headers, "Content-Type": "application/json"}, content=body)
    chunked = api.post("/v1/completions", headers={**headers, "Content-Type": "application/json"},
                       content=(body[i:i + 500] for i in range(0, len(body), 500)))     # no Content-Length
    for reply in (sized, chunked):
        assert reply.status_code == 413 and "2000 bytes (--max-body-bytes)" in reply.json()["error"]["message"]


def test_booleans_and_numbers_are_not_coerced(engine):
    api = client(engine)
    for field, value in (("echo", 0), ("stream", "true"), ("max_tokens", "3"), ("temperature", "0.5")):
        reply = api.post("/v1/completions", headers=bearer(KEY), json={"model": MODEL, "prompt": "hi", field: value})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == field, (field, reply.text)


def test_the_openapi_schema_describes_the_bodies_and_every_error_answer(engine):
    schema = client(engine, max_tokens=8).get("/openapi.json").json()
    bodies = schema["components"]["schemas"]
    for path, body in (("/v1/completions", "CompletionRequest"), ("/v1/chat/completions", "ChatRequest")):
        operation = schema["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/" + body)
        assert {"200", "400", "401", "413", "429", "503"} <= set(operation["responses"])
        assert "422" not in operation["responses"]          # the server answers 400, so the schema says 400
        assert operation["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
        assert operation["security"] == [{"HTTPBearer": []}]
        properties = bodies[body]["properties"]
        assert properties["model"]["enum"] == [MODEL]
        least = 0 if body == "CompletionRequest" else 1      # completions: 0 with echo scores the prompt
        assert {"type": "integer", "minimum": least, "maximum": 8} in properties["max_tokens"]["anyOf"]
        assert properties["n"]["maximum"] == 16 and properties["temperature"]["maximum"] == 2
        logprobs = properties["top_logprobs" if body == "ChatRequest" else "logprobs"]["anyOf"]
        assert {"type": "integer", "minimum": 0, "maximum": 20} in logprobs
    assert "messages" in bodies["ChatRequest"]["required"] and "prompt" in bodies["CompletionRequest"]["required"]
    assert "security" not in schema["paths"]["/health"]["get"]
    keyless = client(engine, api_key=None).get("/openapi.json").json()
    assert "security" not in keyless["paths"]["/v1/completions"]["post"]


def test_the_server_binds_this_machine_only_unless_told_otherwise():
    import argparse

    from anydev.serving import server

    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    args = parser.parse_args([])
    assert args.host == "127.0.0.1" and exposure_warning(args.host, args.api_key) is None
    assert (args.read_timeout, args.send_timeout, args.timeout_keep_alive) == (30.0, 30.0, 5.0)
