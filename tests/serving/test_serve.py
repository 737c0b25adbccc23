"""``anydev serve`` end to end: the server in a subprocess on 127.0.0.1 with the demo model on the cpu
backend, driven by the official ``openai`` client; answers compared with offline greedy generation."""
from __future__ import annotations

import http.client
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from serve_support import FIGURES, KEY, MODEL, Server, request

SYSTEM = ("You are the assistant of the device model. The user asks about the world and you answer with "
          "what is on the device, for the user and the model, in one token at a time.")


@pytest.fixture(scope="module")
def reference():
    """Offline greedy generation with the same model: (completion tokens, chat tokens) helpers."""
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=256, use_graphs=False)) as engine:
        tokenizer = engine.checkpoint.tokenizer

        def completion(prompts, max_tokens):
            ids = [tokenizer.encode(p, add_special_tokens=True) for p in prompts]
            return [o.text for o in engine.generate_ids(ids, SamplingParams(max_new_tokens=max_tokens))]

        def chat(conversations, max_tokens, with_counts=False):
            ids = [tokenizer.encode(tokenizer.apply_chat_template(c, add_generation_prompt=True), add_special_tokens=False)
                   for c in conversations]
            outputs = engine.generate_ids(ids, SamplingParams(max_new_tokens=max_tokens))
            return [(o.text, len(o.token_ids)) if with_counts else o.text for o in outputs]

        yield completion, chat


@pytest.fixture(scope="module")
def server():
    srv = Server("--max-model-len", "256", key=KEY)
    yield srv
    code, out = srv.stop()
    assert code == 0, out
    assert "stopped" in out


def prompts(count: int) -> list[str]:
    words = ["the model", "hello world", "a device", "the user is", "one token", "what is that"]
    return [f"{words[i % len(words)]} number {i}: {words[(i * 5) % len(words)]}" for i in range(count)]


def streamed_text(stream) -> tuple[str, list]:
    chunks = list(stream)
    text = "".join((c.choices[0].text if hasattr(c.choices[0], "text") else c.choices[0].delta.content or "")
                   for c in chunks if c.choices)
    return text, chunks


# ---- answers ---------------------------------------------------------------------------------------

def test_completions_streamed_and_not_equal_offline_greedy(server, reference):
    completion, _ = reference
    client = server.client()
    prompt = "Hello, world! the model of the device is"
    expected = completion([prompt], 24)[0]
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
    assert whole.choices[0].text == expected
    assert whole.choices[0].finish_reason == "length"
    assert (whole.usage.completion_tokens, whole.usage.prompt_tokens) == (24, len(demo_checkpoint().tokenizer.encode(prompt)))
    text, chunks = streamed_text(client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0,
                                                           stream=True, stream_options={"include_usage": True}))
    assert text == expected
    assert chunks[-1].usage.completion_tokens == 24 and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    # How many chunks carry the text depends on how far the front end lags the engine (settled text
    # is sent together), so that it streamed is checked where it is deterministic: with continuous
    # usage every step that gave a token has its chunk, counting the tokens so far.
    text, chunks = streamed_text(client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0,
                                                           stream=True, stream_options={"continuous_usage_stats": True}))
    assert text == expected
    assert [c.usage.completion_tokens for c in chunks] == list(range(1, 25))


def test_chat_streamed_and_not_equal_offline_greedy_with_the_chat_template(server, reference):
    _, chat = reference
    client = server.client()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    expected, tokens = chat([messages], 20, with_counts=True)[0]
    assert tokens == 20      # no early EOS for this prompt, so streaming has something to show
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0)
    assert whole.choices[0].message.content == expected and whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens == 20
    text, chunks = streamed_text(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20,
                                                                temperature=0, stream=True))
    assert text == expected
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)     # not asked for (stream_options.include_usage)


def test_32_concurrent_clients_all_get_their_offline_answer(server, reference):
    completion, _ = reference
    texts = prompts(32)
    expected = completion(texts, 16)

    def ask(prompt):
        client = server.client()
        if len(prompt) % 2:
            return client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0).choices[0].text
        return streamed_text(client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0,
                                                       stream=True))[0]

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(ask, texts))
    assert answers == expected
    assert server.wait_for_metric("anydev_kv_blocks_used", lambda v: v == 0) == 0


def test_a_repeated_system_prompt_hits_the_prefix_cache_with_identical_output(server, reference):
    _, chat = reference
    client = server.client()
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"}]
    second = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "what is the world?"}]
    expected = chat([first, second], 12)
    hits_before = server.metrics()["anydev_prefix_cache_hit_tokens_total"]
    answers = [client.chat.completions.create(model=MODEL, messages=m, max_tokens=12, temperature=0).choices[0].message.content
               for m in (first, second, first)]
    hits = server.metrics()["anydev_prefix_cache_hit_tokens_total"] - hits_before
    system_tokens = len(demo_checkpoint().tokenizer.encode(SYSTEM))
    assert answers == [expected[0], expected[1], expected[0]]
    assert hits >= 2 * (system_tokens // 16) * 16 > 0      # the 2nd and 3rd requests reuse the system prompt
    assert server.metrics()["anydev_prefix_cache_hit_rate"] > 0


def test_stop_strings_and_sampling_with_a_seed(server):
    client = server.client()
    free = client.completions.create(model=MODEL, prompt="the world", max_tokens=30, temperature=0).choices[0].text
    stop = free[6:9]
    cut = client.completions.create(model=MODEL, prompt="the world", max_tokens=30, temperature=0, stop=[stop])
    assert cut.choices[0].text == free[:free.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed, _ = streamed_text(client.completions.create(model=MODEL, prompt="the world", max_tokens=30,
                                                          temperature=0, stop=[stop], stream=True))
    assert streamed == cut.choices[0].text
    hot = dict(model=MODEL, prompt="the world", max_tokens=20, temperature=1.0, top_p=0.9)
    assert (client.completions.create(seed=5, **hot).choices[0].text
            == client.completions.create(seed=5, **hot).choices[0].text)


def test_models_health_and_metrics(server):
    assert [m.id for m in server.client().models.list()] == [MODEL]
    # a request of its own: under xdist this module's tests may each meet a fresh server
    # greedy: "hi" then runs 3 tokens without EOS (a sampled answer may stop early)
    assert server.client().completions.create(model=MODEL, prompt="hi", max_tokens=3,
                                              temperature=0).usage.completion_tokens == 3
    assert json.loads(request(f"{server.url}/health")[2]) == {"status": "ok"}
    names = server.metrics()
    for name in ("anydev_requests_running", "anydev_requests_waiting", "anydev_kv_blocks_used",
                 "anydev_prefix_cache_hit_rate", "anydev_prompt_tokens_total", "anydev_generation_tokens_total",
                 "anydev_time_to_first_token_seconds_count", "anydev_inter_token_latency_seconds_count"):
        assert name in names, name
    assert names["anydev_generation_tokens_total"] > 0 and names["anydev_time_to_first_token_seconds_count"] > 0


def test_a_client_that_disconnects_mid_stream_has_its_request_aborted_and_its_blocks_freed(server):
    aborted_before = server.metrics().get("anydev_requests_total{finish_reason=abort}", 0)
    body = {"model": MODEL, "prompt": "hello world " * 20, "max_tokens": 200, "temperature": 0,
            "stream": True, "ignore_eos": True}
    host = server.url.removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    got = [response.readline() for _ in range(6)]     # a few events, then hang up mid-stream
    assert any(line.startswith(b"data: ") for line in got)
    assert server.metrics()["anydev_kv_blocks_used"] > 0
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    aborted = server.wait_for_metric("anydev_requests_total{finish_reason=abort}", lambda v: v > aborted_before)
    assert aborted == aborted_before + 1
    assert server.wait_for_metric("anydev_kv_blocks_used", lambda v: v == 0) == 0
    assert server.metrics()["anydev_requests_running"] == 0


# ---- bad requests ----------------------------------------------------------------------------------

class Reply:
    def __init__(self, status, text):
        self.status_code, self.text = status, text

    def json(self):
        return json.loads(self.text)


def post(server, path, body, key=KEY, raw=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    status, _, text = request(f"{server.url}{path}", "POST", raw if raw is not None else json.dumps(body).encode(),
                              headers)
    return Reply(status, text)


GOOD = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.mark.parametrize("path, body, raw, param", [
    ("/v1/completions", None, b"{not json", None),
    ("/v1/completions", None, b"[1, 2]", None),
    ("/v1/completions", {**GOOD, "max_tokens": 300}, None, "max_tokens"),        # beyond the 256 context
    ("/v1/completions", {**GOOD, "max_tokens": 0}, None, "max_tokens"),
    ("/v1/completions", {**GOOD, "temperature": 2.5}, None, "temperature"),
    ("/v1/completions", {**GOOD, "temperature": -1}, None, "temperature"),
    ("/v1/completions", {**GOOD, "top_p": 0}, None, "top_p"),
    ("/v1/completions", {**GOOD, "top_p": 1.5}, None, "top_p"),
    ("/v1/completions", {**GOOD, "top_k": -2}, None, "top_k"),
    ("/v1/completions", {**GOOD, "seed": -1}, None, "seed"),
    ("/v1/completions", {**GOOD, "n": 2, "best_of": 3, "stream": True}, None, "best_of"),   # known only at the end
    ("/v1/completions", {**GOOD, "logprobs": 21}, None, "logprobs"),
    ("/v1/completions", {**GOOD, "suffix": "x"}, None, "suffix"),
    ("/v1/completions", {**GOOD, "presence_penalty": 2.5}, None, "presence_penalty"),
    ("/v1/completions", {**GOOD, "repetition_penalty": 5e-324}, None, "repetition_penalty"),   # logits / 0: NaN
    ("/v1/completions", {**GOOD, "logit_bias": {"99999": 1}}, None, "logit_bias"),
    ("/v1/completions", {**GOOD, "stop": ["a", "b", "c", "d", "e"]}, None, "stop"),
    ("/v1/completions", {**GOOD, "prompt": []}, None, "prompt"),
    ("/v1/completions", {**GOOD, "prompt": [5, 100000]}, None, "prompt"),
    ("/v1/completions", {**GOOD, "prompt": "hello " * 300}, None, "prompt"),          # fills the context
    ("/v1/completions", {**GOOD, "prompt": 5}, None, "prompt"),
    ("/v1/completions", {**GOOD, "prompt": "a\ud800b"}, None, "prompt"),                 # a lone surrogate
    ("/v1/completions", {**GOOD, "frobnicate": 1}, None, "frobnicate"),
    ("/v1/completions", {"prompt": "hi"}, None, "model"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, None, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "wizard", "content": "hi"}]}, None, "messages.0.role"),
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function"}]}, None, "tools"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "\udfff"}]}, None, "messages.0.content"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 10**6}, None, "max_tokens"),
])
def test_every_bad_request_gets_a_400_with_an_openai_error_body(server, path, body, raw, param):
    response = post(server, path, body, raw=raw)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert (error["param"] or "").startswith(param), error
    assert post(server, "/v1/completions", GOOD).status_code == 200    # still serving


def test_a_missing_or_wrong_key_gets_401_and_health_stays_open(server):
    for key in (None, "wrong"):
        response = post(server, "/v1/completions", GOOD, key=key)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    assert request(f"{server.url}/v1/models")[0] == 401
    assert request(f"{server.url}/health")[0] == 200


def test_a_body_over_the_limit_gets_413_naming_it(server):
    response = post(server, "/v1/completions", {**GOOD, "prompt": "x" * (2 << 20)})
    assert response.status_code == 413 and "max-body-bytes" in response.json()["error"]["message"]


# ---- scheduling through the server -----------------------------------------------------------------

def concurrent_completions(srv, texts, max_tokens):
    def ask(prompt):
        return srv.client().completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens,
                                               temperature=0).choices[0].text
    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(ask, texts))


def test_chunked_and_unchunked_prefill_and_a_tiny_kv_cache_give_identical_answers(reference):
    completion, _ = reference
    texts = [f"{p} and the device of the model is what we have" for p in prompts(8)]
    expected = completion(texts, 30)
    # 8-token steps: every prompt is prefilled in chunks; 20 blocks of 4 tokens hold one request's
    # ~60 tokens but not two: whenever two of the 8 requests overlap (however the clients' arrivals
    # spread on a loaded machine), one is preempted and recomputed.
    chunked = Server("--max-model-len", "256", "--max-num-batched-tokens", "8", "--block-size", "4",
                     "--num-blocks", "20", "--enforce-eager")
    try:
        assert concurrent_completions(chunked, texts, 30) == expected
        metrics = chunked.metrics()
        assert metrics["anydev_preemptions_total"] > 0
        assert metrics["anydev_kv_blocks_used"] == 0
    finally:
        assert chunked.stop()[0] == 0
    unchunked = Server("--max-model-len", "256", "--no-chunked-prefill", "--no-prefix-caching")
    try:
        assert concurrent_completions(unchunked, texts, 30) == expected
        assert unchunked.metrics()["anydev_prefix_cache_hit_tokens_total"] == 0
    finally:
        assert unchunked.stop()[0] == 0


def test_sigterm_drains_the_request_in_flight_then_exits_cleanly():
    srv = Server("--max-model-len", "256", "--drain-seconds", "120")
    result = {}

    def stream_long():
        stream = srv.client().completions.create(model=MODEL, prompt="hello", max_tokens=120, temperature=0,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body={"ignore_eos": True})
        text, chunks = streamed_text(stream)      # the usage comes in a last chunk of its own, as asked
        result["finish"], result["tokens"] = chunks[-2].choices[0].finish_reason, chunks[-1].usage.completion_tokens

    thread = threading.Thread(target=stream_long)
    thread.start()
    srv.wait_for_metric("anydev_requests_running", lambda v: v == 1)
    code, out = srv.stop()
    thread.join(timeout=60)
    assert code == 0, out
    assert result == {"finish": "length", "tokens": 120}


def test_a_full_waiting_queue_answers_429_with_retry_after_and_loses_nothing(reference):
    completion, _ = reference
    texts = prompts(10)
    expected = completion(texts, 40)
    srv = Server("--max-model-len", "256", "--max-num-seqs", "1", "--max-waiting", "1")
    try:
        def ask(prompt):
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0}
            status, headers, text = request(f"{srv.url}/v1/completions", "POST", json.dumps(body).encode(),
                                            {"Content-Type": "application/json"}, timeout=120)
            return status, headers, json.loads(text)

        with ThreadPoolExecutor(len(texts)) as pool:
            answers = list(pool.map(ask, texts))
        refused = [a for a in answers if a[0] == 429]
        assert refused, "one running and one waiting: ten at once cannot all be taken"
        assert all(a[1].get("retry-after") or a[1].get("Retry-After") for a in refused)
        assert all(a[2]["error"]["code"] == "queue_full" for a in refused)
        for (status, _, body), want in zip(answers, expected):
            assert status in (200, 429)
            if status == 200:
                assert body["choices"][0]["text"] == want
        assert srv.metrics()["anydev_kv_blocks_used"] == 0
    finally:
        assert srv.stop()[0] == 0


def test_a_request_past_its_deadline_ends_with_finish_reason_timeout():
    srv = Server("--request-timeout", "0.2")
    try:
        client = srv.client()
        whole = client.completions.create(model=MODEL, prompt="hi", max_tokens=1000, temperature=0,
                                          extra_body={"ignore_eos": True})
        assert whole.choices[0].finish_reason == "timeout" and whole.usage.completion_tokens < 1000
        assert srv.metrics()["anydev_kv_blocks_used"] == 0
        assert client.completions.create(model=MODEL, prompt="hi", max_tokens=3,
                                         temperature=0).usage.completion_tokens == 3
    finally:
        assert srv.stop()[0] == 0


# ---- hostile input (hypothesis) ----------------------------------------------------------------------

ANY_TEXT = st.text(st.characters(exclude_categories=()))     # lone surrogates included
JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=40),
                 st.lists(st.integers(), max_size=5), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


HOSTILE = {"inputs_tried": 0, "answered_200": 0, "refused_4xx": 0, "server_errors_5xx": 0}


def assert_answered(server, path, body):
    try:
        raw = json.dumps(body).encode()
    except (TypeError, ValueError):
        return
    reply = post(server, path, None, raw=raw)
    HOSTILE["inputs_tried"] += 1
    kind = {2: "answered_200", 4: "refused_4xx", 5: "server_errors_5xx"}.get(reply.status_code // 100)
    if kind:
        HOSTILE[kind] += 1
    FIGURES.record("hostile bodies (hypothesis)", **HOSTILE)
    assert reply.status_code in (200, 400, 413), (reply.status_code, reply.text[:300])
    if reply.status_code != 200:
        assert reply.json()["error"]["message"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(prompt=st.one_of(ANY_TEXT, st.text(min_size=2000, max_size=5000), JUNK,
                        st.lists(st.integers(-5, 1000), max_size=20)),
       max_tokens=st.one_of(st.integers(1, 3), JUNK), temperature=st.one_of(st.floats(0, 2), JUNK),
       stop=st.one_of(st.none(), st.text(max_size=3), st.lists(st.text(max_size=3), max_size=5), JUNK))
def test_arbitrary_completion_bodies_get_an_answer_or_a_400_never_a_5xx(server, prompt, max_tokens, temperature, stop):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature}
    if stop is not None:
        body["stop"] = stop
    assert_answered(server, "/v1/completions", body)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(messages=st.one_of(
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool", ""]),
                                    "content": st.one_of(ANY_TEXT, JUNK,
                                                         st.lists(st.fixed_dictionaries({"type": st.just("text"),
                                                                                         "text": st.text()})))}),
             max_size=4),
    JUNK), extra=st.dictionaries(st.sampled_from(["n", "top_p", "top_k", "seed", "stream", "logprobs", "user",
                                                  "response_format", "structured_outputs"]),
                                 JUNK, max_size=2))
def test_arbitrary_chat_bodies_get_an_answer_or_a_400_never_a_5xx(server, messages, extra):
    body = {"model": MODEL, "messages": messages, "max_tokens": 2, **extra}
    assert_answered(server, "/v1/chat/completions", body)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(constraint=st.one_of(
    st.fixed_dictionaries({"regex": st.text(max_size=24)}), st.fixed_dictionaries({"grammar": st.text(max_size=40)}),
    st.fixed_dictionaries({"choice": st.lists(st.text(max_size=6), max_size=3)}),
    st.fixed_dictionaries({"json": st.one_of(st.text(max_size=30), st.dictionaries(
        st.sampled_from(["type", "properties", "enum", "items", "pattern", "minLength", "$ref"]), JUNK, max_size=3))})))
def test_arbitrary_structured_outputs_get_an_answer_or_a_400_never_a_5xx(server, constraint):
    pytest.importorskip("llguidance")
    assert_answered(server, "/v1/completions", {**GOOD, "max_tokens": 2, "structured_outputs": constraint})


def test_the_server_is_healthy_after_the_hostile_input(server):
    assert request(f"{server.url}/health")[0] == 200
    assert server.wait_for_metric("anydev_kv_blocks_used", lambda v: v == 0) == 0
    assert server.metrics().get("anydev_requests_rejected_total{status=500}", 0) == 0


SOAK_REQUESTS = 2000


def test_a_soak_of_thousands_of_requests_leaves_threads_blocks_and_memory_where_they_were(server):
    """Bounded: 2000 short requests from 8 clients; the server's threads, KV blocks and RSS (after a
    warm-up of 200) come back to where they were."""
    status = server.proc_status

    def burst(count):
        def ask(i):
            body = {"model": MODEL, "prompt": f"the device {i}", "max_tokens": 2, "temperature": 0,
                    "stream": bool(i % 2)}
            try:
                return post(server, "/v1/completions", body).status_code
            except OSError:
                return None       # no answer at all: lost
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(ask, range(count)))

    assert set(burst(200)) == {200}
    server.wait_for_metric("anydev_requests_running", lambda v: v == 0)
    threads, rss_kib = status("Threads"), status("VmRSS")
    start = server.resources()
    statuses = burst(SOAK_REQUESTS)
    assert server.wait_for_metric("anydev_kv_blocks_used", lambda v: v == 0) == 0
    end = server.resources()
    FIGURES.record("soak", clients=8, requests=SOAK_REQUESTS, answered_200=statuses.count(200),
                   server_errors_5xx=sum(s is not None and s >= 500 for s in statuses), requests_lost=statuses.count(None),
                   start=start, end=end)
    assert set(statuses) == {200}
    assert server.metrics()["anydev_requests_waiting"] == 0
    assert status("Threads") == threads
    assert status("VmRSS") - rss_kib < 64 * 1024, "the server's memory grew by more than 64 MiB"
