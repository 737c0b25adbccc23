"""Start-up as a user meets it: a fresh process to its first token, phase by phase, Triton's cache empty and warm.

    python benchmarks/make_random_model.py /tmp/llama-8b.gguf --hidden 4096 --layers 32 --heads 32 --kv-heads 8 \\
        --intermediate 14336 --vocab 128256 --gguf Q4_K
    python benchmarks/startup_bench.py --device nvidia --model /tmp/llama-8b.gguf --out startup.json
    python benchmarks/startup_bench.py --device nvidia --model /tmp/llama-8b.gguf --engine-args "--lazy-graphs"
    python benchmarks/startup_bench.py --device cpu --model /tmp/tiny --cases test_infer --caches cold   # smoke run

Every run is a new process, started with ``$ANYDEV_SPAWN_TIME`` set to the moment before it starts:
- test_infer: ``examples/test_infer.py --model M --prompt P --no-chat-template --max-new-tokens 1
  --timeline-out F``, a prompt of ``--prompt-tokens`` tokens. Its wall time runs from the spawn to the
  process's exit; its phases are the start-up timeline it writes (``anydev.core.process_timeline``:
  interpreter, imports, backend open, checkpoint + tokenizer, kernels load, rank 0's init and capture
  phases, engine other, first prefill, first token), which add up to the time to its output.
- serve: ``python -m anydev serve --model M`` on a free port of 127.0.0.1; phases "engine core up"
  (spawn to the line the server prints when its engine core is ready), "front end up (/health 200)"
  (from there to the first 200 from /health) and "first streamed token" (a streamed completion of the
  same prompt sent then, to its first token); its wall time runs from the spawn to the server's exit
  after SIGINT.
Caches: "cold" points ``TRITON_CACHE_DIR`` at a new empty folder, "warm" at the folder the cold run of
the same case filled (or one filled by an unrecorded run first, when no cold run was asked for). The
page cache is left as it is (the weights' file is read once before the first run). ``--importtime``
adds the top-level imports of one test_infer run by cumulative time (``python -X importtime``).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from anydev.core.process_timeline import parse_phases_line
from anydev.serving.server import CORE_STARTUP_LINE

ROOT = Path(__file__).resolve().parents[1]
TEST_INFER = ROOT / "examples" / "test_infer.py"
CASES = ("test_infer", "serve")
CACHES = ("cold", "warm")
SERVED_NAME = "startup-bench"
#: The line ``anydev serve`` prints once its engine core is up (then it starts the HTTP front end).
CORE_UP_LINE = "anydev serve: model "
WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing about rivers and hills".split()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="HF model directory or .gguf file")
    p.add_argument("--device", default="cpu")
    p.add_argument("--cases", default=",".join(CASES), help=f"of {','.join(CASES)}")
    p.add_argument("--caches", default=",".join(CACHES), help=f"of {','.join(CACHES)}")
    p.add_argument("--prompt-tokens", type=int, default=16, help="the prompt's length in tokens (default 16)")
    p.add_argument("--engine-args", default="", help="more engine flags for both commands, one string")
    p.add_argument("--timeout", type=float, default=300, help="seconds one run may take (default 300)")
    p.add_argument("--importtime", action="store_true", help="also list test_infer's slowest top-level imports")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    for name, allowed in (("cases", CASES), ("caches", CACHES)):
        values = getattr(args, name).split(",")
        if not values or any(v not in allowed for v in values):
            p.error(f"--{name} takes a comma-separated list of {', '.join(allowed)}, got {getattr(args, name)!r}")
        setattr(args, name, values)
    return args


def prompt_of(model: str, tokens: int) -> tuple[str, int]:
    """Plain text whose encoding (no chat template) has ``tokens`` tokens, else the fewest above; and its length."""
    from anydev.core.loading.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(model)
    try:
        tokenizer = checkpoint.tokenizer
        text, length = "", 0
        for i in range(64 * tokens):
            text = f"{text} {WORDS[i % len(WORDS)]}".strip()
            length = len(tokenizer.encode_prompt(text, False))
            if length >= tokens:
                break
        return text, length
    finally:
        checkpoint.close()


def read_once(model: str) -> float:
    """Read every file of the model once (the page cache as a second run finds it); returns seconds."""
    start = time.perf_counter()
    paths = [Path(model)] if Path(model).is_file() else sorted(Path(model).iterdir())
    for path in paths:
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass
    return time.perf_counter() - start


def child_env(triton_cache: str) -> dict:
    return dict(os.environ, TRITON_CACHE_DIR=triton_cache, PYTHONUNBUFFERED="1",
                ANYDEV_SPAWN_TIME=repr(time.time()))


def run_test_infer(args, prompt: str, triton_cache: str, workdir: Path, importtime: bool = False) -> dict:
    timeline = workdir / "timeline.json"
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), str(TEST_INFER), "--device",
               args.device, "--model", args.model, "--prompt", prompt, "--no-chat-template", "--max-new-tokens", "1",
               "--timeline-out", str(timeline), *shlex.split(args.engine_args)]
    env = child_env(triton_cache)
    spawned = float(env["ANYDEV_SPAWN_TIME"])
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.time() - spawned
    row = {"case": "test_infer", "rc": done.returncode, "wall": wall, "command": shlex.join(command)}
    if done.returncode != 0 or not timeline.exists():
        row["error"] = (done.stdout + done.stderr)[-4000:]
        return row
    report = json.loads(timeline.read_text())
    phases = report["phases"]
    row.update(phases=phases, to_first_token=report["total"] - phases["first token"], to_output=report["total"])
    if importtime:
        row["imports"] = top_imports(done.stderr)
    return row


def top_imports(stderr: str, count: int = 15) -> list[dict]:
    """The top-level imports and those they made directly (depth 0 and 1) by cumulative time, from
    ``-X importtime``'s lines."""
    tops = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        if cumulative.strip().isdigit() and depth <= 1:
            tops.append({"module": name.strip(), "depth": depth, "seconds": int(cumulative) / 1e6})
    return sorted(tops, key=lambda t: -t["seconds"])[:count]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(port: int, timeout: float) -> int | None:
    """/health's status, None while nothing answers (refused, or the listener not serving yet)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def _first_streamed_token(port: int, prompt: str, timeout: float) -> float:
    """Send a streamed completion of ``prompt`` (greedy, one token); seconds to its first token's chunk."""
    body = json.dumps({"model": SERVED_NAME, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True})
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"/v1/completions answered {response.status}: {response.read()[:500]!r}")
        for line in response:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]" and b'"text"' in line:
                return time.perf_counter() - start
        raise RuntimeError("the stream ended without a token")
    finally:
        connection.close()


def run_serve(args, prompt: str, triton_cache: str, workdir: Path) -> dict:
    port = free_port()
    command = [sys.executable, "-m", "anydev", "serve", "--device", args.device, "--model", args.model,
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME, *shlex.split(args.engine_args)]
    env = child_env(triton_cache)
    spawned = float(env["ANYDEV_SPAWN_TIME"])
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    lines: list[tuple[float, str]] = []   # (seconds since the spawn, line) of the server's output
    reader = threading.Thread(target=lambda: lines.extend((time.time() - spawned, line) for line in proc.stdout),
                              daemon=True)
    reader.start()
    row = {"case": "serve", "command": shlex.join(command)}
    deadline = spawned + args.timeout
    try:
        status = None
        while status != 200 and time.time() < deadline and proc.poll() is None:
            status = _health(port, timeout=max(0.1, deadline - time.time()))
            if status != 200:
                time.sleep(0.02)
        ready = time.time() - spawned
        if status != 200:
            raise RuntimeError(f"no 200 from /health within {args.timeout} s (exit {proc.poll()})")
        first = _first_streamed_token(port, prompt, max(1.0, deadline - time.time()))
        core_up = next((at for at, line in list(lines) if line.startswith(CORE_UP_LINE)), ready)
        row["phases"] = {"engine core up": core_up, "front end up (/health 200)": ready - core_up,
                         "first streamed token": first}
        row["to_first_token"] = ready + first
    except (RuntimeError, OSError, http.client.HTTPException) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    row["rc"], row["wall"] = proc.returncode, time.time() - spawned
    reader.join(10)
    if "error" not in row:   # read once the server is gone and its output all read
        startup = next((line for _, line in lines if line.startswith(CORE_STARTUP_LINE)), None)
        if startup is None:
            row["error"] = f"the server printed no {CORE_STARTUP_LINE.strip()!r} line"
        else:
            row["core_phases"] = parse_phases_line(startup[startup.index("(") + 1:startup.rindex(")")])
    (workdir / "serve.log").write_text("".join(f"{at:9.3f} {line}" for at, line in lines))
    if "error" in row:
        row["error"] += "\n" + (workdir / "serve.log").read_text()[-4000:]
    return row


RUNNERS = {"test_infer": run_test_infer, "serve": run_serve}


def run(args) -> int:
    prompt, prompt_tokens = prompt_of(args.model, args.prompt_tokens)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "device": args.device,
              "host": platform.node(), "model": args.model, "engine_args": args.engine_args,
              "prompt": prompt, "prompt_tokens": prompt_tokens, "command": shlex.join(sys.argv),
              "page_cache_read_s": read_once(args.model), "runs": []}
    with tempfile.TemporaryDirectory(prefix="anydev-startup-") as tmp:
        for case in args.cases:
            cache = Path(tmp) / f"triton-{case}"
            if "cold" not in args.caches:   # warm: a cache an unrecorded run filled
                RUNNERS[case](args, prompt, str(cache), Path(tmp))
            for kind in args.caches:
                if kind == "cold":
                    cache = Path(tempfile.mkdtemp(prefix=f"triton-{case}-", dir=tmp))
                row = {"cache": kind, **RUNNERS[case](args, prompt, str(cache), Path(tmp))}
                report["runs"].append(row)
                print(summary(row), flush=True)
                write(args.out, report)   # after every run: a run cut short leaves the ones before it
        if args.importtime:
            row = run_test_infer(args, prompt, str(Path(tmp) / "triton-test_infer"), Path(tmp), importtime=True)
            report["imports"] = row.get("imports", [])
            for item in report["imports"]:
                print(f"  import {'  ' * item['depth']}{item['module']}: {item['seconds'] * 1e3:.0f} ms")
    write(args.out, report)
    return 0 if all(r["rc"] == 0 and "error" not in r for r in report["runs"]) else 1


def write(path: str | None, report: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(report, indent=1))


def summary(row: dict) -> str:
    head = f"{row['case']:>10} {row['cache']:>4}: wall {row['wall']:.2f} s"
    if "error" in row:
        return f"{head}, FAILED (exit {row['rc']}):\n{row['error']}"
    phases = ", ".join(f"{p} {s:.2f}" for p, s in row["phases"].items() if s >= 0.005)
    core = ", ".join(f"{p} {s:.2f}" for p, s in row.get("core_phases", {}).items())
    return f"{head}, to first token {row['to_first_token']:.2f} s ({phases})" + (f"\n{'':16}engine core: {core}" if core else "")


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
