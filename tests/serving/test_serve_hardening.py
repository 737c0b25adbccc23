"""``anydev serve`` under overload, faults and hostile input (cpu backend, the server on 127.0.0.1 in a
subprocess): more clients than it holds, clients killed mid-stream, clients that stop reading or send
slowly, SIGTERM under load, schemathesis against its own OpenAPI schema. Each ends with nothing lost,
nothing wrong, no 5xx, zero KV blocks in use and the server healthy. Each records its figures
(benchmarks/serve_hardening.py writes them to results/)."""
from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from serve_support import FIGURES, KEY, MODEL, Server, request

CONTEXT = 1024
LONG = 1000            # tokens a long request asks for (ignore_eos): a few seconds of the demo model


@pytest.fixture(scope="module")
def reference():
    """Offline greedy generation: completion(prompts, max_tokens) -> texts; chat(conversations, n)."""
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=CONTEXT, use_graphs=False)) as engine:
        tokenizer = engine.checkpoint.tokenizer

        def completion(prompts, max_tokens, ignore_eos=False):
            ids = [tokenizer.encode(p, add_special_tokens=True) for p in prompts]
            sampling = SamplingParams(max_new_tokens=max_tokens, ignore_eos=ignore_eos)
            return [o.text for o in engine.generate_ids(ids, sampling)]

        def chat(conversations, max_tokens):
            ids = [tokenizer.encode(tokenizer.apply_chat_template(c, add_generation_prompt=True), add_special_tokens=False)
                   for c in conversations]
            return [o.text for o in engine.generate_ids(ids, SamplingParams(max_new_tokens=max_tokens))]

        yield completion, chat


@pytest.fixture(scope="module")
def guarded():
    """A small server: 4 running + 4 waiting requests, 2 s read and send timeouts, 1 s keep-alive."""
    srv = Server("--max-model-len", str(CONTEXT), "--max-num-seqs", "4", "--max-waiting", "4",
                 "--read-timeout", "2", "--send-timeout", "2", "--timeout-keep-alive", "1", key=KEY)
    yield srv
    code, out = srv.stop()
    assert code == 0, out
    assert KEY not in out, "the API key was logged"


def counts(srv: Server) -> dict:
    """The counters a test compares before and after."""
    m = srv.metrics()
    return {"finished": sum(v for k, v in m.items() if k.startswith("anydev_requests_total{")),
            "aborted": m.get("anydev_requests_total{finish_reason=abort}", 0),
            "refused_429": m.get("anydev_requests_rejected_total{status=429}", 0),
            "errors_500": m.get("anydev_requests_rejected_total{status=500}", 0)}


def settle(srv: Server, start: dict | None = None) -> dict:
    """Once nothing runs (bounded waits; with ``start``, also until the clients' kept-alive
    connections have timed out): the 5xx answers the server ever gave, whether it is healthy, and
    its resources (RSS, threads, open files, KV blocks in use)."""
    srv.wait_for_metric("anydev_requests_running", lambda v: v == 0)
    srv.wait_for_metric("anydev_kv_blocks_used", lambda v: v == 0)
    deadline = time.monotonic() + 15
    while start and srv.resources()["open_files"] > start["open_files"] + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    m = srv.metrics()
    return {"server_errors_5xx": int(sum(v for k, v in m.items() if k.startswith("anydev_requests_rejected_total{status=5"))),
            "waiting_after": int(m["anydev_requests_waiting"]), "healthy_after": srv.healthy(), "end": srv.resources()}


def assert_clean(end: dict) -> None:
    """Nothing left waiting, zero KV blocks in use, no 5xx ever, /health OK."""
    assert end["end"]["kv_blocks_used"] == 0, end
    assert (end["waiting_after"], end["server_errors_5xx"], end["healthy_after"]) == (0, 0, True), end


def prompts(count: int) -> list[str]:
    words = ["the model", "hello world", "a device", "the user is", "one token", "what is that"]
    return [f"{words[i % 6]} number {i}: {words[(i * 5) % 6]}" for i in range(count)]


def sse_stream(port: int, body: dict, headers: dict, timeout: float = 120):
    """POST ``body`` with stream=true over a raw http.client connection: (status, events) where
    events are the decoded ``data:`` payloads (``"[DONE]"`` as is); a cut connection ends the list."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}), headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            return response.status, [json.loads(response.read())]
        events = []
        try:
            for line in response:
                if line.startswith(b"data: "):
                    data = line[6:].strip().decode()
                    events.append(data if data == "[DONE]" else json.loads(data))
        except (OSError, http.client.HTTPException):
            pass
        return 200, events
    finally:
        conn.close()


# ---- overload ----------------------------------------------------------------------------------------

def test_overload_every_request_is_answered_correctly_or_refused_with_429(guarded, reference):
    """48 clients at once against 4 running + 4 waiting: each gets its offline greedy answer or a 429
    with Retry-After; none lost, none wrong, no 5xx; afterwards zero KV blocks in use."""
    completion, chat = reference
    clients, max_tokens = 48, 64
    texts = prompts(clients)
    expected = completion(texts, max_tokens)
    conversations = [[{"role": "user", "content": t}] for t in texts]
    expected_chat = chat(conversations, max_tokens)
    before = counts(guarded)
    start = guarded.resources()
    barrier = threading.Barrier(clients)

    def ask(i):
        client = guarded.client()
        kind = ("completion", "chat")[i % 2]
        stream = (i // 2) % 2 == 1
        barrier.wait(timeout=60)
        try:
            if kind == "completion":
                reply = client.completions.create(model=MODEL, prompt=texts[i], max_tokens=max_tokens, temperature=0,
                                                  stream=stream)
                text = ("".join(c.choices[0].text for c in reply if c.choices) if stream else reply.choices[0].text)
                return "answered" if text == expected[i] else f"wrong: {text!r}"
            reply = client.chat.completions.create(model=MODEL, messages=conversations[i], max_tokens=max_tokens,
                                                   temperature=0, stream=stream)
            text = ("".join(c.choices[0].delta.content or "" for c in reply if c.choices) if stream
                    else reply.choices[0].message.content)
            return "answered" if text == expected_chat[i] else f"wrong: {text!r}"
        except openai.RateLimitError as exc:
            retry_after = exc.response.headers.get("retry-after", "")
            return "refused" if retry_after.isdigit() and exc.body.get("code") == "queue_full" else f"bad 429: {exc}"
        except openai.APIStatusError as exc:
            return f"status {exc.status_code}: {exc.message}"
        except openai.APIConnectionError as exc:
            return f"lost: {exc!r}"

    with ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(ask, range(clients)))
    answered, refused = outcomes.count("answered"), outcomes.count("refused")
    after = counts(guarded)
    end = settle(guarded, start)
    FIGURES.record("overload", clients=clients, capacity_running=4, capacity_waiting=4, requests=clients,
                   answered_correctly=answered, refused_429=refused,
                   wrong=sum(o.startswith("wrong") for o in outcomes),
                   requests_lost=clients - answered - refused, start=start, **end)
    assert_clean(end)
    assert answered + refused == clients, [o for o in outcomes if o not in ("answered", "refused")]
    assert answered >= 4 and refused > 0, outcomes          # 48 at once cannot all fit in 8 places
    assert after["refused_429"] - before["refused_429"] == refused
    assert after["finished"] - before["finished"] == answered      # every admitted request finished


# ---- faults ------------------------------------------------------------------------------------------

KILLED_CLIENT = """
import sys, openai
client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0, timeout=120)
args = dict(model="anydev-demo", prompt="the device " + sys.argv[3], max_tokens=int(sys.argv[4]), temperature=0,
            extra_body={"ignore_eos": True})
if sys.argv[5] == "stream":
    for chunk in client.completions.create(stream=True, **args):
        print("chunk", flush=True)
else:
    print("asking", flush=True)
    client.completions.create(**args)
"""


def test_clients_killed_mid_request_have_their_requests_aborted_and_blocks_freed(guarded, reference):
    """Four clients (three streaming, one not) SIGKILLed while their long requests run: each request
    is aborted, the KV cache goes back to zero blocks in use, and the server answers the next one."""
    before, start = counts(guarded), guarded.resources()
    procs = [subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, f"{guarded.url}/v1", KEY, str(i), str(LONG - 20),
                               "stream" if i < 3 else "whole"], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
             for i in range(4)]
    try:
        for proc in procs:
            assert proc.stdout.readline().split() in (["chunk"], ["asking"])
        assert guarded.wait_for_metric("anydev_requests_running", lambda v: v == 4) == 4
        assert guarded.metrics()["anydev_kv_blocks_used"] > 0
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
    end = settle(guarded, start)
    after = counts(guarded)
    FIGURES.record("clients killed mid-request (SIGKILL)", clients_killed=len(procs),
                   requests_aborted=int(after["aborted"] - before["aborted"]), start=start, **end)
    assert_clean(end)
    assert after["aborted"] - before["aborted"] == len(procs)
    completion, _ = reference
    reply = guarded.client().completions.create(model=MODEL, prompt="hello world", max_tokens=16, temperature=0)
    assert reply.choices[0].text == completion(["hello world"], 16)[0]


def test_a_client_that_stops_reading_is_dropped_and_blocks_no_one(reference):
    """A streaming client that reads a little and then nothing, its socket open: others are served
    meanwhile with correct answers; once every buffer is full and --send-timeout passes, the server
    drops the connection and aborts the request; zero KV blocks stay in use. (A long served-model name
    makes each event ~24 KB, so the demo model's 1000 tokens overflow the few MB of socket buffers.)"""
    name = "stalled-" + "m" * 24_000
    srv = Server("--max-model-len", str(CONTEXT), "--send-timeout", "1", "--served-model-name", name, key=KEY)
    try:
        before, start = counts(srv), srv.resources()
        staller = socket.socket()
        staller.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        staller.connect(("127.0.0.1", srv.port))
        body = json.dumps({"model": name, "prompt": "hi", "max_tokens": LONG, "stream": True, "ignore_eos": True}).encode()
        staller.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY.encode()
                        + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        staller.settimeout(60)
        assert staller.recv(1000).startswith(b"HTTP/1.1 200")           # then it reads no more

        completion, _ = reference
        texts = prompts(4)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda t: srv.client().completions.create(
                model=name, prompt=t, max_tokens=12, temperature=0).choices[0].text, texts))
        assert answers == completion(texts, 12)                          # not blocked by the stalled one

        dropped = srv.wait_for_metric("anydev_connections_dropped_total{reason=send_timeout}", lambda v: v >= 1)
        assert dropped == 1
        rest = b""
        try:
            while chunk := staller.recv(1 << 20):
                rest += chunk
        except ConnectionResetError:
            pass
        staller.close()
        end = settle(srv, start)
        after = counts(srv)
        FIGURES.record("client stops reading", stalled_clients=1, dropped_by_send_timeout=int(dropped),
                       others_answered_correctly=len(answers), start=start, **end)
        assert b"[DONE]" not in rest                                    # the stream was cut, not finished
        assert_clean(end)
        assert after["finished"] - before["finished"] == 5              # the 4 answers and the dropped one
    finally:
        code, out = srv.stop()
    assert code == 0, out


def test_slow_and_idle_clients_time_out(guarded):
    """--read-timeout: a client that sends half its headers, one that sends its headers and part of
    its body, one that sends half of its second request each get a 408 naming the limit and a closed
    connection; one that connects and sends nothing is closed unanswered (--first-request-timeout);
    --timeout-keep-alive closes an idle kept-alive connection; the server serves on."""
    before = guarded.metrics().get("anydev_connections_dropped_total{reason=read_timeout}", 0)
    silent_before = guarded.metrics().get("anydev_connections_dropped_total{reason=first_request_timeout}", 0)
    start = guarded.resources()
    partial_body = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                    + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\": ")
    silent = socket.create_connection(("127.0.0.1", guarded.port), timeout=60)
    sends = [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty", partial_body]
    sockets = []
    for data in sends:
        s = socket.create_connection(("127.0.0.1", guarded.port), timeout=60)
        s.sendall(data)
        sockets.append(s)
    kept = socket.create_connection(("127.0.0.1", guarded.port), timeout=60)    # a second request, half sent
    kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while not first.endswith(b'{"status":"ok"}'):
        first += kept.recv(4096)
    kept.sendall(b"GET /health HTTP/1.1\r\nHo")
    sockets.append(kept)
    sends.append(b"a whole request, then half of another")
    assert guarded.client().completions.create(model=MODEL, prompt="hi", max_tokens=3).usage.completion_tokens == 3
    for s in sockets:
        answer = b""
        while chunk := s.recv(4096):                         # until the server closes it
            answer += chunk
        s.close()
        assert answer.startswith(b"HTTP/1.1 408") and b"--read-timeout" in answer, answer
    assert silent.recv(4096) == b""                          # closed without a byte written
    silent.close()
    idle = socket.create_connection(("127.0.0.1", guarded.port), timeout=60)
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    first = idle.recv(4096)
    assert first.startswith(b"HTTP/1.1 200")
    while idle.recv(4096):                                   # kept alive, then closed by the server
        pass
    idle.close()
    dropped = guarded.metrics()["anydev_connections_dropped_total{reason=read_timeout}"] - before
    end = settle(guarded, start)
    FIGURES.record("slow and idle clients", slow_clients=len(sends), answered_408=int(dropped),
                   idle_keep_alive_closed=1, start=start, **end)
    assert dropped == len(sends)
    assert guarded.metrics()["anydev_connections_dropped_total{reason=first_request_timeout}"] - silent_before == 1
    assert_clean(end)


def test_sigterm_under_load_aborts_what_runs_answers_with_an_error_and_exits_0_with_no_blocks_in_use(reference):
    """Twelve clients streaming long requests (and more waiting) when SIGTERM comes, with
    --drain-seconds 0: every request ends with its correct answer, or with an error event/503 saying
    the server is shutting down, or is refused at the door; none is cut or wrong; the server exits 0
    and its last line reports 0 KV blocks in use."""
    completion, _ = reference
    srv = Server("--max-model-len", str(CONTEXT), "--max-num-seqs", "4", "--max-waiting", "16",
                 "--drain-seconds", "0", key=KEY)
    texts = prompts(12)
    outcomes, answers = [], []        # answers (client, text) are checked against offline greedy after

    def client(i):
        for _ in range(5):                 # bounded: at most 5 requests each, until refused at the door
            body = {"model": MODEL, "prompt": texts[i], "max_tokens": 200 if i % 2 else LONG, "temperature": 0,
                    "ignore_eos": i % 2 == 0}
            try:
                status, events = sse_stream(srv.port, body, srv.headers(), timeout=120)
            except (OSError, http.client.HTTPException):
                outcomes.append("refused at the door")
                return
            if status != 200:
                error = events[0].get("error", {})
                outcomes.append("shutting down" if status == 503 and "shutting down" in error.get("message", "")
                                else "refused" if status == 429 else f"status {status}: {error}")
                continue
            finish = [e for e in events[:-1] if "choices" in e and e["choices"] and e["choices"][0]["finish_reason"]]
            if events and events[-1] == "[DONE]" and finish:
                text = "".join(e["choices"][0]["text"] for e in events[:-1] if e.get("choices"))
                outcomes.append("answered")
                answers.append((i, text))
            elif events[-2:-1] and "error" in events[-2] and "shutting down" in events[-2]["error"]["message"]:
                outcomes.append("shutting down")
            else:
                outcomes.append(f"cut: {events[-2:]}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    assert srv.wait_for_metric("anydev_requests_running", lambda v: v == 4) == 4
    start = time.monotonic()
    code, out = srv.stop(timeout=60)
    for thread in threads:
        thread.join(timeout=120)
    assert code == 0, out
    assert all(not t.is_alive() for t in threads)
    for i, text in answers:
        want = completion([texts[i]], 200)[0] if i % 2 else completion([texts[i]], LONG, ignore_eos=True)[0]
        if text != want:
            outcomes[outcomes.index("answered")] = "wrong"
    last = re.search(r"stopped with (\d+) of (\d+) KV blocks in use, (\d+) requests running and (\d+) waiting", out)
    assert last, out
    aborted = re.search(r"aborted (\d+) requests still running", out)
    FIGURES.record("SIGTERM under load", clients=12, requests=len(outcomes),
                   answered_correctly=outcomes.count("answered"),
                   ended_with_shutdown_error=outcomes.count("shutting down"),
                   refused=outcomes.count("refused at the door") + outcomes.count("refused"),
                   wrong=outcomes.count("wrong"), cut=sum(o.startswith("cut") for o in outcomes),
                   requests_lost=sum(o not in ("answered", "shutting down", "refused at the door", "refused", "wrong")
                                     for o in outcomes),
                   aborted_at_shutdown=int(aborted.group(1)) if aborted else 0, exit_code=code,
                   kv_blocks_used_at_exit=int(last.group(1)), exit_seconds=round(time.monotonic() - start, 1))
    assert (last.group(1), last.group(3), last.group(4)) == ("0", "0", "0"), last.group(0)
    assert aborted and int(aborted.group(1)) >= 1, out
    assert set(outcomes) <= {"answered", "shutting down", "refused at the door", "refused"}, outcomes
    assert "shutting down" in outcomes


# ---- fuzzing: schemathesis -------------------------------------------------------------------------

FUZZ_CHECKS = ("not_a_server_error", "negative_data_rejection", "status_code_conformance", "content_type_conformance",
               "response_schema_conformance", "ignored_auth", "missing_required_header", "unsupported_method")


def test_schemathesis_against_the_servers_own_openapi_schema_finds_no_5xx(tmp_path):
    """schemathesis generates bodies from the server's OpenAPI schema (positive and negative cases,
    a bounded number per endpoint, with the key) and checks each answer: never a 5xx, every status
    and body as documented, invalid data refused, the key enforced. The server is healthy after.
    The inputs come from a fixed seed (``ANYDEV_FUZZ_SEED``, default 0), so that a run is repeatable
    and a failure is reproduced by its seed; other seeds explore further."""
    schemathesis = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    if schemathesis is None:
        pytest.fail("schemathesis is not installed: pip install -e '.[test]'")
    examples = int(os.environ.get("ANYDEV_FUZZ_EXAMPLES", "50"))
    seed = os.environ.get("ANYDEV_FUZZ_SEED", "0")
    srv = Server("--max-model-len", "128", "--max-tokens-limit", "8", "--request-timeout", "10", key=KEY)
    try:
        start = srv.resources()
        report = tmp_path / "schemathesis.json"
        command = [schemathesis, "run", f"{srv.url}/openapi.json", "-H", f"Authorization: Bearer {KEY}",
                   "--checks", ",".join(FUZZ_CHECKS), "--max-examples", str(examples), "--workers", "1",
                   "--request-timeout", "30", "--no-shrink", "--seed", seed, "--report", "json",
                   "--report-json-path", str(report)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)   # its cache dir there
        summary = json.loads(report.read_text()) if report.exists() else {}
        assert done.returncode == 0, f"seed {seed}: " + done.stdout[-8000:] + done.stderr[-2000:]
        generated = summary["test_cases"]["generated"]
        end = settle(srv, start)
        FIGURES.record("fuzzing (schemathesis)", endpoints=5, inputs_tried=generated, max_examples_per_endpoint=examples,
                       checks=len(FUZZ_CHECKS), failures=summary["test_cases"]["with_failures"], start=start, **end)
        assert generated >= 5 * 10 and summary["test_cases"]["with_failures"] == 0
        assert_clean(end)
    finally:
        code, out = srv.stop()
    assert code == 0, out


def test_neither_the_key_nor_a_wrong_one_is_ever_logged(guarded):
    wrong = "wrong-key-7777777777"
    for key in (wrong, KEY, ""):
        api = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key=key or "x", max_retries=0, timeout=60)
        try:
            api.models.list()
        except openai.AuthenticationError as exc:
            assert key != KEY and wrong not in exc.message
    request(f"{guarded.url}/v1/models", headers={"Authorization": f"Token {wrong}"})   # another scheme
    out = guarded.output()
    assert KEY not in out and wrong not in out


def test_a_flood_of_idle_sockets_keeps_no_request_out_and_the_open_files_stay_within_the_cap():
    """Every accepted socket counts against --max-connections; past it the longest-idle one makes room,
    so requests sent after a flood of idle sockets are all answered, and the server's open files stay
    within the cap; an idle socket is closed unanswered after --first-request-timeout."""
    cap, flood = 8, 120
    srv = Server("--max-model-len", "64", "--max-connections", str(cap), "--first-request-timeout", "2")
    idle = []
    try:
        base = srv.open_files_once_served()
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(flood)]   # sending nothing
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
        statuses = [request(f"{srv.url}/v1/completions", "POST", body, {"content-type": "application/json"})[0]
                    for _ in range(10)]
        open_files = srv.resources()["open_files"]
        assert statuses == [200] * 10
        assert open_files <= base + cap, (base, open_files)
        closed_by_server = srv.wait_for_metric(
            "anydev_connections_dropped_total{reason=evicted_idle}", lambda v: v >= flood - cap)
        assert closed_by_server >= flood - cap
        for sock in idle:
            sock.close()
        late = socket.create_connection(("127.0.0.1", srv.port))
        late.settimeout(60)
        try:
            answer = late.recv(1)          # the server closes it after 2 s without writing a byte
        except ConnectionResetError:
            answer = b""
        finally:
            late.close()
        assert answer == b""
        assert srv.wait_for_metric("anydev_connections_dropped_total{reason=first_request_timeout}",
                                   lambda v: v >= 1) >= 1
    finally:
        for sock in idle:
            sock.close()
        code, output = srv.stop()
    assert code == 0 and "Traceback" not in output, output


def test_a_burst_of_idle_sockets_never_takes_the_open_files_past_the_cap():
    """Every socket is counted as it is accepted and a bare one is closed at once to make room, so
    the server's open files stay within the cap (plus a few in passage) however fast a burst of idle
    sockets comes, sampled throughout; requests sent during the burst are all answered."""
    import resource
    cap, flood, requests = 32, 1500, 8
    # In passage past the cap: a connection with a protocol that the gate evicts (the requests', idle
    # once answered) closes its file at the event loop's next turn, and each socket is accepted
    # before the oldest bare one is closed for it.
    margin = requests + 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < flood + 200:
        pytest.skip(f"the open-file limit ({hard}) is below the {flood + 200} this burst needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, flood + 200) if hard == resource.RLIM_INFINITY
                                                 else min(hard, max(soft, flood + 200)), hard))
    srv = Server("--max-model-len", "64", "--max-connections", str(cap), "--first-request-timeout", "30")
    idle, peak, stop = [], [], threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak.append(len(os.listdir(f"/proc/{srv.proc.pid}/fd")))
            except OSError:
                pass                  # a file closed while being listed
            time.sleep(0.002)
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
    try:
        base = srv.open_files_once_served()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        for _ in range(flood):        # as fast as a client can: non-blocking connects that send nothing
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", srv.port))
            idle.append(sock)
        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(lambda _: request(f"{srv.url}/v1/completions", "POST", body,
                                                       {"content-type": "application/json"}, timeout=60)[0],
                                     range(requests)))
        srv.wait_for_metric("anydev_connections_dropped_total{reason=evicted_idle}", lambda v: v >= flood - cap)
        stop.set()
        sampler.join()
        assert statuses == [200] * requests
        assert max(peak) <= base + cap + margin, (base, max(peak))
    finally:
        stop.set()
        for sock in idle:
            sock.close()
        code, output = srv.stop()
    assert code == 0 and "Traceback" not in output, output


def test_a_port_in_use_is_one_error_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "anydev", "serve", "--device", "cpu", "--port", str(port)],
                                capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert len(result.stderr.splitlines()) == 1, result.stderr
