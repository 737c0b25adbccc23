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

The client measures the server, not itself: each row says how busy the client was (its CPU time over
the case's wall time, the busiest client process) and how late its event loop ran a timer (lag p99).
A client near 100% CPU or with a lag near the ITL is what bounds that row: one asyncio process spends
~10-40 us of CPU on each token event, so at 256 streams it needs more than a decode step per step.
--client-processes spreads the streams (all but the shared conversations) over several processes with
the same arrival times; --client-cpus pins those processes apart from the server. Do that for the
saturate ratios on one machine (the bench under ``taskset -c 0-11``, ``--client-cpus 12-15``): a step with
prompt tokens is host-bound, and clients on the server's cores slow it (at 256 streams on an H100, 0.82x
with them beside the server against 1.00x apart).
The offline row is timed per token too (when each step's tokens are back in generate_ids), so the
saturation ratios compare the same measures; its decode step time is the issue's ITL target.
Both saturate rows also count the engine's own steps of the case (the server's /metrics counters before
and after it; the offline run's stats): prefill steps (any with prompt tokens) and their seconds, decode
steps and their mean, so that a gap between them shows as slower steps or as a longer prefill. Every
served case also records the CPU its server used (Linux): the engine core process's and the busiest
front end's, each as a share of one core over the case's wall time (a front end near 100% is what
bounds its streams).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import numpy as np

from anydev.cli.bench.client import Result, stream_request


def parse_args(argv=None):
    from anydev.core.engine_args import add_engine_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", help="HF model directory (default: the embedded demo model)")
    p.add_argument("--tiny", action="store_true", help="small sizes for a cpu run with the demo model")
    # The engine's flags (as anydev serve's); here --max-num-seqs defaults to 64 (tiny: 16),
    # --max-model-len to 4096, make_random_model's context (tiny: 1024), and --max-num-batched-tokens
    # to 512, vLLM's chunked default.
    add_engine_arguments(p.add_argument_group("engine"), exclude=("seed",), defaults=dict(device="cpu", tp=1, max_num_batched_tokens=512))   # its --seed: the load's
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
    p.add_argument("--client-processes", type=int, default=max(1, (os.cpu_count() or 1) // 4),
                   help="client processes the streams are spread over (default: a quarter of the host's cores, "
                        "at least 1; the shared conversations stay in one)")
    p.add_argument("--client-cpus", type=cpu_list, default=None,
                   help="pin the client processes to these CPUs (\"8-13\"; run the bench under taskset for the "
                        "server's and the offline run's): keeps their CPU away from the server's")
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
        self.api_server_count = args.api_server_count
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

    def processes(self) -> tuple[int | None, list[int]]:
        """(the engine core's pid, the front ends' pids): the core's from the line the server prints,
        the front ends are the server's process (one) or its other children (several). Linux only
        (``/proc`` with its children lists); (None, []) elsewhere."""
        with open(self.log.name) as log:
            found = re.search(r"engine core pid (\d+)", log.read())
        core = int(found.group(1)) if found else None
        if core is None or not os.path.exists(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children"):
            return None, []
        children = set()
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            with open(f"/proc/{self.proc.pid}/task/{task}/children") as f:
                children.update(int(pid) for pid in f.read().split())
        front_ends = sorted(children - {core}) if self.api_server_count > 1 else [self.proc.pid]
        return core, front_ends

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---- the client: anydev bench serve's (one streamed request, each token timed) ---------------------


def random_ids(rng: random.Random, vocab: int, count: int) -> list[int]:
    return [rng.randrange(2, vocab) for _ in range(count)]


# ---- the load: one client process, or several --------------------------------------------------------
@dataclass
class Load:
    """What one client process measured: its results, its CPU seconds, its event loop's timer lags."""

    results: list[Result]
    cpu_seconds: float
    lags: list[float]


#: How often the client's event loop is probed for lag.
LAG_PROBE_S = 0.005


async def _probe_lag(lags: list[float]) -> None:
    """Every LAG_PROBE_S, how late the event loop woke for its timer: the time it was busy elsewhere."""
    while True:
        planned = time.perf_counter() + LAG_PROBE_S
        await asyncio.sleep(LAG_PROBE_S)
        lags.append(max(0.0, time.perf_counter() - planned))


async def timed_run(jobs, deadline: float) -> Load:
    """Start each job (``at`` seconds, a coroutine factory giving a list of Results) at its time from
    now; cancel what still runs at ``deadline`` seconds."""
    cpu, lags = time.process_time(), []
    probe = asyncio.ensure_future(_probe_lag(lags))

    async def delayed(job, at):
        await asyncio.sleep(at)
        return await job()

    tasks = [asyncio.ensure_future(delayed(job, at)) for at, job in jobs]
    done, pending = await asyncio.wait(tasks, timeout=deadline)
    for task in pending:
        task.cancel()
    probe.cancel()
    results = []
    for task in tasks:
        if task in done and task.exception() is None:
            results += task.result()
        else:
            results.append(Result(error="cancelled at the case deadline" if task in pending else repr(task.exception())))
    return Load(results, time.process_time() - cpu, lags)


def request_job(port: int, prompt: list[int], max_tokens: int):
    async def run():
        return [await stream_request(port, prompt, max_tokens)]
    return run


def arrival_times(count: int, rate: float, rng: random.Random) -> list[float]:
    """Poisson arrivals at ``rate`` per second (all at 0 for an infinite rate)."""
    at, times = 0.0, []
    for _ in range(count):
        times.append(at)
        at += rng.expovariate(rate) if rate != float("inf") else 0.0
    return times


def _client_process(port: int, requests: list[tuple[float, list[int], int]], start_at: float, deadline: float) -> Load:
    """One of several client processes: from wall time ``start_at`` on, its share of the streams."""
    time.sleep(max(0.0, start_at - time.time()))
    return asyncio.run(timed_run([(at, request_job(port, prompt, n)) for at, prompt, n in requests], deadline))


def run_load(args, jobs, rate: float) -> tuple[list[Load], float]:
    """Run a case's jobs against ``args.port``: requests ``(prompt, max_tokens)`` spread round robin
    over ``args.client_processes`` processes (started before the clock), other jobs (conversations)
    in this one. Returns each process's load and the wall time from the first arrival."""
    times = arrival_times(len(jobs), rate, random.Random(args.seed))
    processes = args.client_processes if all(isinstance(job, tuple) for job in jobs) else 1
    if processes == 1:
        timed = [(at, request_job(args.port, *job) if isinstance(job, tuple) else job) for at, job in zip(times, jobs)]
        start = time.time()
        load = asyncio.run(timed_run(timed, args.case_deadline))
        return [load], time.time() - start
    shares = [[(at, *job) for at, job in list(zip(times, jobs))[i::processes]] for i in range(processes)]
    context = multiprocessing.get_context("spawn")
    started = context.Barrier(processes + 1)
    with context.Pool(processes, initializer=_started, initargs=(started, args.client_cpus)) as pool:
        started.wait(timeout=300)                      # every worker is up (and idle) before the clock starts
        start = time.time() + 0.2
        loads = pool.starmap(_client_process, [(args.port, share, start, args.case_deadline) for share in shares],
                             chunksize=1)
    return loads, time.time() - start


def _started(barrier, cpus: list[int] | None = None) -> None:
    """A client process's first act: move to ``cpus`` (when given), then say it is up."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    barrier.wait(timeout=300)


def cpu_list(text: str) -> list[int]:
    """``taskset``'s list syntax ("8-13" or "0,2,4-7"), sorted (the report's JSON takes a list)."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


# ---- workloads: requests (prompt, max_tokens), or conversations -----------------------------------
def random_jobs(args, vocab, rng):
    return [(random_ids(rng, vocab, rng.randint(args.prompt_len // 2, args.prompt_len)), args.output_len)
            for _ in range(args.requests)]


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
        jobs.append((random_ids(rng, vocab, args.long_len if long else max(8, args.prompt_len // 8)),
                     8 if long else args.output_len))
    return jobs


def warmup_jobs(args, vocab, rng):
    """A long prompt and short ones of every workload's lengths, all at once (random ids: no cache hits later)."""
    lengths = [args.long_len, args.prompt_len, args.prompt_len // 2, max(8, args.prompt_len // 8), args.system_len]
    return [(random_ids(rng, vocab, n), 8) for n in lengths for _ in range(2)]


def saturate_jobs(args, prompts):
    return [(p, args.output_len) for p in prompts]


# ---- figures ---------------------------------------------------------------------------------------
def pct(values, q) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


def summarise(workload: str, config: str, results: list[Result], seconds: float, hits: tuple[float, float],
              loads: list[Load] | None = None) -> dict:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [x for r in ok for x in r.itl]
    out_tokens = sum(r.output_tokens for r in ok)
    queried, hit = hits
    return dict(workload=workload, config=config, requests=len(results), ok=len(ok),
                failed=[r.error for r in results if not r.ok][:3], seconds=seconds,
                requests_per_s=len(ok) / seconds, output_tokens_per_s=out_tokens / seconds,
                ttft_p50_ms=pct(ttft, 50), ttft_p99_ms=pct(ttft, 99), itl_p50_ms=pct(itl, 50), itl_p99_ms=pct(itl, 99),
                itl_max_ms=pct(itl, 100),
                prefix_hit_rate=hit / queried if queried else 0.0,
                client_processes=len(loads) if loads else 0,
                client_cpu=max(load.cpu_seconds for load in loads) / seconds if loads else float("nan"),
                client_lag_p99_ms=pct([lag for load in loads for lag in load.lags], 99) if loads else float("nan"))


def row(r: dict) -> str:
    return (f"{r['workload']:>9}  {r['config']:<22} {r['ok']:>4}/{r['requests']:<4} {r['seconds']:>7.1f}  "
            f"{r['requests_per_s']:>6.2f}  {r['output_tokens_per_s']:>9.1f}  {r['ttft_p50_ms']:>8.1f}  "
            f"{r['ttft_p99_ms']:>8.1f}  {r['itl_p50_ms']:>7.1f}  {r['itl_p99_ms']:>7.1f}  {r['itl_max_ms']:>7.1f}  "
            f"{r['prefix_hit_rate']:>5.2f}  {100 * r['client_cpu']:>6.0f}%  {r['client_lag_p99_ms']:>7.1f}")


HEADER = (f"{'workload':>9}  {'config':<22} {'ok/req':>9} {'secs':>7}  {'req/s':>6}  {'out tok/s':>9}  "
          f"{'TTFT p50':>8}  {'TTFT p99':>8}  {'ITL p50':>7}  {'ITL p99':>7}  {'ITL max':>7}  {'hits':>5}  "
          f"{'cli CPU':>7}  {'lag p99':>7}")


#: A case's engine steps (:func:`step_figures`): each field's counter in the server's /metrics (the
#: offline run's ``GenerationStats`` has the fields themselves).
STEP_COUNTERS = {"prefill_steps": "anydev_prefill_steps_total", "prefill_tokens": "anydev_prefill_step_tokens_total",
                 "prefill_seconds": "anydev_prefill_step_seconds_total", "decode_steps": "anydev_decode_steps_total",
                 "decode_tokens": "anydev_decode_step_tokens_total", "decode_seconds": "anydev_decode_step_seconds_total"}


def step_figures(steps: dict) -> dict:
    """The engine's steps of a case: prefill (any step with prompt tokens) and decode, their tokens and
    seconds, and the mean decode step (ms): where a served case's time goes beside the offline one's."""
    mean = 1000 * steps["decode_seconds"] / steps["decode_steps"] if steps["decode_steps"] else float("nan")
    return dict(steps, decode_step_mean_ms=mean)


def steps_line(r: dict) -> str:
    return (f"{'':>9}  steps: prefill {r['prefill_steps']:.0f} ({r['prefill_tokens']:,.0f} tokens, "
            f"{r['prefill_seconds']:.2f} s), decode {r['decode_steps']:.0f} ({r['decode_step_mean_ms']:.2f} ms a step)")


def cpu_seconds(pid: int) -> float:
    """A process's CPU seconds so far: the sum over its threads of their time on a CPU, to the
    nanosecond (``/proc/PID/task/TID/schedstat``; a thread that ended is not counted), or, where the
    kernel keeps no schedstat, the process's user and system time in clock ticks (``/proc/PID/stat``)."""
    if not os.path.exists(f"/proc/{pid}/schedstat"):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()     # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):       # the thread ended meanwhile
            pass
    return total / 1e9


def run_case(args, server: Server, workload: str, config: str, jobs, rate: float) -> dict:
    before = server.metrics()
    core, front_ends = server.processes()
    cpu_before = {pid: cpu_seconds(pid) for pid in (core, *front_ends)} if core else {}
    loads, seconds = run_load(args, jobs, rate)
    cpu_used = {pid: cpu_seconds(pid) - was for pid, was in cpu_before.items()}
    after = server.metrics()
    hits = tuple(after.get(k, 0) - before.get(k, 0) for k in ("anydev_prefix_cache_queried_tokens_total",
                                                                "anydev_prefix_cache_hit_tokens_total"))
    summary = summarise(workload, config, [r for load in loads for r in load.results], seconds, hits, loads)
    steps = {field: after.get(name, 0) - before.get(name, 0) for field, name in STEP_COUNTERS.items()}
    summary.update(step_figures(steps))
    if cpu_used:     # shares of one core over the case
        summary.update(core_cpu=cpu_used[core] / seconds, front_end_cpu=max(cpu_used[p] for p in front_ends) / seconds)
    print(row(summary), flush=True)
    if workload == "saturate":
        print(steps_line(summary), flush=True)
        if cpu_used:
            print(f"{'':>9}  server CPU (shares of one core): engine core {100 * summary['core_cpu']:.0f}%, busiest "
                  f"front end {100 * summary['front_end_cpu']:.0f}%", flush=True)
    return summary


def offline_saturation(args, prompts, warm_prompts) -> dict:
    """The same requests through InferEngine.generate_ids in this process (no server), each token
    timed when its step's tokens are back (a wrapper around the engine's step, what generate_ids
    drives), as the client times the server's."""
    from anydev.core import InferEngine, SamplingParams
    from anydev.core.engine_args import engine_config_from_args
    from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint

    checkpoint = demo_checkpoint() if args.model is None else open_checkpoint(args.model)
    config = engine_config_from_args(args)
    sampling = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
    arrivals: dict[int, list[float]] = {}
    with InferEngine(checkpoint, config) as engine:
        engine.generate_ids(warm_prompts, sampling)         # warm-up (graph captures), no cache hits after
        step = engine.step

        def timed_step():
            got = step()
            now = time.perf_counter()
            for seq in got:
                arrivals.setdefault(seq.seq_id, []).append(now)
            return got

        engine.step = timed_step
        start = time.perf_counter()
        engine.generate_ids(prompts, sampling)
        seconds = time.perf_counter() - start
        stats = engine.last_stats
    results = [Result(ok=True, ttft=times[0] - start, itl=list(np.diff(times)), output_tokens=len(times))
               for times in arrivals.values()]
    summary = summarise("saturate", "offline generate_ids", results, seconds, (0, 0))
    return dict(summary, decode_tokens_per_s=stats.decode_tokens_per_s, decode_step_ms=stats.decode_step_ms,
                **step_figures({field: getattr(stats, field) for field in STEP_COUNTERS}))


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
        print(steps_line(rows[-1]), flush=True)
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
            served["itl_p50_ms"] / offline["decode_step_ms"])
        ratios["saturation ITL p50, server / offline, both per token"] = served["itl_p50_ms"] / offline["itl_p50_ms"]
        ratios["saturation TTFT p50, server / offline, both per token"] = served["ttft_p50_ms"] / offline["ttft_p50_ms"]
        ratios["saturation mean decode step, server / offline (the engine's own clock)"] = (
            served["decode_step_mean_ms"] / offline["decode_step_mean_ms"])
        ratios["saturation prefill seconds, server / offline (the engine's own clock)"] = (
            served["prefill_seconds"] / offline["prefill_seconds"])
    return ratios


if __name__ == "__main__":
    raise SystemExit(main())
