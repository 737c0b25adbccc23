"""Serving benchmark: ``anydev serve`` under bounded Poisson load, with its ablations side by side.

    python benchmarks/serve_bench.py --tiny                                  # cpu smoke (demo model), ~2 min
    python benchmarks/make_random_model.py /tmp/llama-1b                     # once, on the GPU machine
    python benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --out results/serve_bench.json

Each server configuration runs as its own ``anydev serve`` subprocess on 127.0.0.1 (a real server: its
HTTP, its engine loop), driven by an asyncio client that streams every request with per-step usage, so
time to first token (TTFT) and inter-token latency (ITL) are measured per token at the client.

Workloads (every request has a fixed output length: ``ignore_eos``):
  random   random prompts of --prompt-len/2..--prompt-len tokens;
  shared   --conversations chats of --turns turns behind one --system-len token system prompt; a turn is
           sent when the previous answer has arrived, the history growing by each turn;
  mixed    short requests with one --long-len token prompt every --long-every requests;
  saturate --batch requests at once, compared with offline generation of the same requests in-process
           (the server's overhead at that batch size).
Ablations in the same run: prefix caching off/on (shared), chunked prefill off/on (mixed). Each server
first serves an unrecorded warm-up (every prompt length once), so first-use compilation (Triton
specialisations) stays out of the cases. ITL max is the longest stall any running stream saw.
Arrivals are Poisson at --rate requests/s (conversations/s for shared); every case has a fixed number of
requests and its own --case-deadline, after which what is still running is cancelled and reported.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

import numpy as np


def parse_args(argv=None):
    from anydev.core.engine_args import add_engine_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", help="HF model directory (default: the embedded demo model)")
    p.add_argument("--tiny", action="store_true", help="small sizes for a cpu run with the demo model")
    # The engine's flags (as anydev serve's); here --max-num-seqs defaults to 64 (tiny: 16),
    # --max-model-len to 4096, make_random_model's context (tiny: 1024), and --max-num-batched-tokens
    # to 512, vLLM's chunked default.
    add_engine_arguments(p.add_argument_group("engine"))
    p.set_defaults(device="cpu", tp=1, max_num_batched_tokens=512)
    p.add_argument("--rate", type=float, default=None, help="Poisson arrival rate, per s (default 8; tiny 4)")
    p.add_argument("--requests", type=int, default=None, help="requests of the random and mixed cases (default 200; tiny 24)")
    p.add_argument("--prompt-len", type=int, default=None, help="default 512 (tiny 64)")
    p.add_argument("--output-len", type=int, default=None, help="default 128 (tiny 16)")
    p.add_argument("--system-len", type=int, default=None, help="shared system prompt, tokens (default 1536; tiny 256)")
    p.add_argument("--conversations", type=int, default=None, help="default 32 (tiny 6)")
    p.add_argument("--turns", type=int, default=None, help="default 4 (tiny 3)")
    p.add_argument("--long-len", type=int, default=None, help="long prompts of mixed, tokens (default 3072; tiny 512)")
    p.add_argument("--long-every", type=int, default=8)
    p.add_argument("--batch", type=int, default=None, help="saturate: requests at once (default 64; tiny 8)")
    p.add_argument("--workloads", default="random,shared,mixed,saturate")
    p.add_argument("--case-deadline", type=float, default=None, help="seconds per case (default 240; tiny 180)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-server-count", type=int, default=1, help="the server's front-end processes (default 1)")
    p.add_argument("--out", help="write the figures as JSON here (e.g. results/serve_bench.json)")
    args = p.parse_args(argv)
    full = dict(max_num_seqs=64, max_model_len=4096, rate=8.0, requests=200, prompt_len=512, output_len=128,
                system_len=1536, conversations=32, turns=4, long_len=3072, batch=64, case_deadline=240.0)
    tiny = dict(max_num_seqs=16, max_model_len=1024, rate=4.0, requests=24, prompt_len=64, output_len=16,
                system_len=256, conversations=6, turns=3, long_len=512, batch=8, case_deadline=180.0)
    for name, value in (tiny if args.tiny else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


# ---- the server ------------------------------------------------------------------------------------
class Server:
    """``anydev serve`` in a subprocess with the given extra flags."""

    def __init__(self, args, flags: list[str]):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        from anydev.core.engine_args import engine_argv

        command = [sys.executable, "-m", "anydev", "serve", *engine_argv(args), "--port", str(self.port),
                   "--max-waiting", "100000", "--max-tokens-limit", str(args.max_model_len),
                   "--served-model-name", "bench", *flags]
        if args.model:
            command += ["--model", args.model]
        if args.api_server_count > 1:
            command += ["--api-server-count", str(args.api_server_count)]
        self.log = open(f"/tmp/anydev-serve-bench-{self.port}.log", "w")
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 900
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"anydev serve did not start; see {self.log.name}")
            time.sleep(0.5)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            text = r.read().decode()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, _, value = line.partition(" ")
                values[name] = float(value)
        return values

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---- the client ------------------------------------------------------------------------------------
@dataclass
class Result:
    ok: bool = False
    error: str = ""
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0


async def stream_request(port: int, prompt: list[int], max_tokens: int) -> Result:
    """One streamed /v1/completions over a raw HTTP/1.1 connection; latencies per token."""
    result = Result()
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        status = (await reader.readline()).split()
        if len(status) < 2 or status[1] != b"200":
            result.error = f"HTTP {status[1:2]}: {(await reader.read())[-300:]!r}"
            return result
        last, done = start, 0
        while line := await reader.readline():    # chunked transfer framing lines are skipped below
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            usage = chunk.get("usage")
            if "error" in chunk or usage is None:
                result.error = str(chunk.get("error", "a chunk without usage"))
                return result
            new = usage["completion_tokens"] - done
            if new > 0:
                if result.ttft is None:
                    result.ttft = now - start
                    new -= 1
                result.itl += [(now - last) / new] * new if new > 0 else []
                done, last = usage["completion_tokens"], now
            result.prompt_tokens = usage["prompt_tokens"]
        result.output_tokens = done
        result.ok = done == max_tokens
        if not result.ok:
            result.error = f"{done} of {max_tokens} tokens"
        return result
    finally:
        writer.close()


def random_ids(rng: random.Random, vocab: int, count: int) -> list[int]:
    return [rng.randrange(2, vocab) for _ in range(count)]


async def poisson_run(port: int, jobs, rate: float, deadline: float, rng: random.Random) -> tuple[list[Result], float]:
    """Start each job (a coroutine factory giving a list of Results) at Poisson times; cancel what
    still runs at ``deadline`` seconds. Returns the results and the wall time."""
    start = time.perf_counter()

    async def delayed(job, at):
        await asyncio.sleep(at)
        return await job()

    at, tasks = 0.0, []
    for job in jobs:
        tasks.append(asyncio.ensure_future(delayed(job, at)))
        at += rng.expovariate(rate) if rate != float("inf") else 0.0
    done, pending = await asyncio.wait(tasks, timeout=deadline)
    for task in pending:
        task.cancel()
    results = []
    for task in tasks:
        if task in done and task.exception() is None:
            results += task.result()
        else:
            results.append(Result(error="cancelled at the case deadline" if task in pending else repr(task.exception())))
    return results, time.perf_counter() - start


# ---- workloads -------------------------------------------------------------------------------------
def random_jobs(args, vocab, rng):
    def job(prompt):
        return lambda: _one(args.port, prompt, args.output_len)
    return [job(random_ids(rng, vocab, rng.randint(args.prompt_len // 2, args.prompt_len))) for _ in range(args.requests)]


def shared_jobs(args, vocab, rng):
    system = random_ids(rng, vocab, args.system_len)

    def conversation(turns):
        async def run():
            history, results = list(system), []
            for user in turns:
                history += user
                results.append(await stream_request(args.port, list(history), args.output_len))
                history += random_ids(rng, vocab, args.output_len)    # the answer, as the next turn's history
            return results
        return run

    turn_len = max(8, args.prompt_len // 8)
    return [conversation([random_ids(rng, vocab, turn_len) for _ in range(args.turns)]) for _ in range(args.conversations)]


def mixed_jobs(args, vocab, rng):
    jobs = []
    for i in range(args.requests):
        long = i % args.long_every == args.long_every - 1
        prompt = random_ids(rng, vocab, args.long_len if long else max(8, args.prompt_len // 8))
        jobs.append((lambda p, n: (lambda: _one(args.port, p, n)))(prompt, 8 if long else args.output_len))
    return jobs


def warmup_jobs(args, vocab, rng):
    """A long prompt and short ones of every workload's lengths, all at once (random ids: no cache hits later)."""
    lengths = [args.long_len, args.prompt_len, args.prompt_len // 2, max(8, args.prompt_len // 8), args.system_len]
    prompts = [random_ids(rng, vocab, n) for n in lengths for _ in range(2)]
    return [(lambda p: (lambda: _one(args.port, p, 8)))(p) for p in prompts]


def saturate_jobs(args, prompts):
    return [(lambda p: (lambda: _one(args.port, p, args.output_len)))(p) for p in prompts]


async def _one(port, prompt, max_tokens):
    return [await stream_request(port, prompt, max_tokens)]


# ---- figures ---------------------------------------------------------------------------------------
def summarise(workload: str, config: str, results: list[Result], seconds: float, hits: tuple[float, float]) -> dict:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [x for r in ok for x in r.itl]
    out_tokens = sum(r.output_tokens for r in ok)

    def pct(values, q):
        return float(np.percentile(values, q)) * 1000 if values else float("nan")

    queried, hit = hits
    return dict(workload=workload, config=config, requests=len(results), ok=len(ok),
                failed=[r.error for r in results if not r.ok][:3], seconds=seconds,
                requests_per_s=len(ok) / seconds, output_tokens_per_s=out_tokens / seconds,
                ttft_p50_ms=pct(ttft, 50), ttft_p99_ms=pct(ttft, 99), itl_p50_ms=pct(itl, 50), itl_p99_ms=pct(itl, 99),
                itl_max_ms=pct(itl, 100),
                prefix_hit_rate=hit / queried if queried else 0.0)


def row(r: dict) -> str:
    return (f"{r['workload']:>9}  {r['config']:<22} {r['ok']:>4}/{r['requests']:<4} {r['seconds']:>7.1f}  "
            f"{r['requests_per_s']:>6.2f}  {r['output_tokens_per_s']:>9.1f}  {r['ttft_p50_ms']:>8.1f}  "
            f"{r['ttft_p99_ms']:>8.1f}  {r['itl_p50_ms']:>7.1f}  {r['itl_p99_ms']:>7.1f}  {r['itl_max_ms']:>7.1f}  "
            f"{r['prefix_hit_rate']:>5.2f}")


HEADER = (f"{'workload':>9}  {'config':<22} {'ok/req':>9} {'secs':>7}  {'req/s':>6}  {'out tok/s':>9}  "
          f"{'TTFT p50':>8}  {'TTFT p99':>8}  {'ITL p50':>7}  {'ITL p99':>7}  {'ITL max':>7}  {'hits':>5}")


def run_case(args, server: Server, workload: str, config: str, jobs, rate: float) -> dict:
    before = server.metrics()
    results, seconds = asyncio.run(poisson_run(server.port, jobs, rate, args.case_deadline, random.Random(args.seed)))
    after = server.metrics()
    hits = tuple(after.get(k, 0) - before.get(k, 0) for k in ("anydev_prefix_cache_queried_tokens_total",
                                                                "anydev_prefix_cache_hit_tokens_total"))
    summary = summarise(workload, config, results, seconds, hits)
    print(row(summary), flush=True)
    return summary


def offline_saturation(args, prompts, warm_prompts) -> dict:
    """The same requests through InferEngine.generate_ids in this process (no server)."""
    from anydev.core import InferEngine, SamplingParams
    from anydev.core.engine_args import engine_config_from_args
    from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint

    checkpoint = demo_checkpoint() if args.model is None else open_checkpoint(args.model)
    config = engine_config_from_args(args)
    sampling = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
    with InferEngine(checkpoint, config) as engine:
        engine.generate_ids(warm_prompts, sampling)         # warm-up (graph captures), no cache hits after
        start = time.perf_counter()
        engine.generate_ids(prompts, sampling)
        seconds = time.perf_counter() - start
        stats = engine.last_stats
    return dict(workload="saturate", config="offline generate_ids", requests=len(prompts), ok=len(prompts), failed=[],
                seconds=seconds, requests_per_s=len(prompts) / seconds,
                output_tokens_per_s=len(prompts) * args.output_len / seconds,
                decode_tokens_per_s=stats.decode_tokens_per_s, ttft_p50_ms=float("nan"), ttft_p99_ms=float("nan"),
                itl_p50_ms=stats.decode_step_ms, itl_p99_ms=float("nan"), itl_max_ms=float("nan"), prefix_hit_rate=0.0)


def main(argv=None) -> int:
    args = parse_args(argv)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = set(workloads) - {"random", "shared", "mixed", "saturate"}
    if unknown:
        raise SystemExit(f"unknown workloads: {sorted(unknown)}")
    from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint
    with (demo_checkpoint() if args.model is None else open_checkpoint(args.model)) as checkpoint:
        vocab = checkpoint.config.vocab_size
    rng = random.Random(args.seed)
    rows = []
    print(f"serve_bench: {args.device} x {args.tp}, model {args.model or 'embedded demo'}, rate {args.rate}/s, "
          f"max_num_seqs {args.max_num_seqs}")
    print(HEADER)
    # (server flags, config label, workloads it runs)
    plans = [([], "prefix on, chunked on", [w for w in workloads]),
             (["--no-prefix-caching"], "prefix OFF, chunked on", ["shared"] if "shared" in workloads else []),
             (["--no-chunked-prefill"], "prefix on, chunked OFF", ["mixed"] if "mixed" in workloads else [])]
    saturate_rng, warm_rng = random.Random(args.seed + 1), random.Random(args.seed + 2)
    saturate_prompts = [random_ids(saturate_rng, vocab, args.prompt_len) for _ in range(args.batch)]
    warm_prompts = [random_ids(warm_rng, vocab, args.prompt_len) for _ in range(args.batch)]   # no cache hits
    for flags, label, runs in plans:
        if not runs:
            continue
        server = Server(args, flags)
        args.port = server.port
        try:   # not recorded: every prompt shape once, so first-use compilation stays out of the cases
            run_case(args, server, "warm-up", label, warmup_jobs(args, vocab, random.Random(args.seed + 3)), float("inf"))
            for workload in runs:
                case_rng = random.Random(f"{args.seed}-{workload}")    # the same requests in every configuration
                if workload == "random":
                    rows.append(run_case(args, server, workload, label, random_jobs(args, vocab, case_rng), args.rate))
                elif workload == "shared":
                    rows.append(run_case(args, server, workload, label, shared_jobs(args, vocab, case_rng),
                                         args.rate / args.turns))
                elif workload == "mixed":
                    rows.append(run_case(args, server, workload, label, mixed_jobs(args, vocab, case_rng), args.rate))
                elif workload == "saturate":
                    run_case(args, server, "warm-up", label, saturate_jobs(args, warm_prompts), float("inf"))
                    rows.append(run_case(args, server, workload, label, saturate_jobs(args, saturate_prompts),
                                         float("inf")))
        finally:
            server.stop()
    if "saturate" in workloads:
        rows.append(offline_saturation(args, saturate_prompts, warm_prompts))
        print(row(rows[-1]), flush=True)
    ratios = _ratios(rows)
    print()
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    if args.out:
        report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), host=platform.node(), command=" ".join(sys.argv),
                      device=args.device, tp=args.tp, model=args.model or "embedded demo",
                      settings={k: v for k, v in vars(args).items() if k not in ("out", "port")}, rows=rows,
                      ratios=ratios)
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    return 0


def _ratios(rows: list[dict]) -> dict[str, float]:
    def find(workload, config):
        return next((r for r in rows if r["workload"] == workload and r["config"] == config), None)

    ratios = {}
    on, off = find("shared", "prefix on, chunked on"), find("shared", "prefix OFF, chunked on")
    if on and off:
        ratios["shared-prefix TTFT p50, prefix caching off / on (target >= 3)"] = off["ttft_p50_ms"] / on["ttft_p50_ms"]
    on, off = find("mixed", "prefix on, chunked on"), find("mixed", "prefix on, chunked OFF")
    if on and off:
        ratios["mixed ITL p99, chunked prefill off / on (target >= 2)"] = off["itl_p99_ms"] / on["itl_p99_ms"]
        ratios["mixed ITL max (the longest stall of a running stream), chunked prefill off / on"] = (
            off["itl_max_ms"] / on["itl_max_ms"])
    served, offline = find("saturate", "prefix on, chunked on"), find("saturate", "offline generate_ids")
    if served and offline:
        ratios["saturation output tok/s, server / offline generate_ids (same batch)"] = (
            served["output_tokens_per_s"] / offline["output_tokens_per_s"])
        ratios["saturation ITL p50, server / offline decode step (target <= 1.3)"] = (
            served["itl_p50_ms"] / offline["itl_p50_ms"])
    return ratios


if __name__ == "__main__":
    raise SystemExit(main())
