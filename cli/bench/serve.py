"""``anydev bench serve``: streamed requests against a running ``anydev serve``, as ``vllm bench serve``."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
import urllib.request

from .client import Result, stream_request
from .figures import mean, percentile, print_block, random_prompts, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="the server's address")
    parser.add_argument("--port", type=int, default=8000, help="the server's port")
    parser.add_argument("--model", help="the model id to send (default: the first of the server's /v1/models)")
    parser.add_argument("--api-key", default=None,     # read at run time: --help never shows the key
                        help="the server's API key (default: $ANYDEV_API_KEY)")
    parser.add_argument("--num-prompts", type=int, default=1000, help="requests to send")
    parser.add_argument("--input-len", type=int, default=128, help="tokens of each random prompt")
    parser.add_argument("--output-len", type=int, default=128,
                        help="tokens asked of each request (the end-of-sequence token ignored)")
    parser.add_argument("--vocab-size", type=int, default=256,
                        help="the random prompt ids are drawn below it (every model's vocabulary is larger)")
    parser.add_argument("--request-rate", type=float, default=float("inf"),
                        help="requests per second, Poisson arrivals (inf: all at once)")
    parser.add_argument("--max-concurrency", type=int, default=None, help="requests in flight at most (default: no bound)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts and the arrivals")
    parser.add_argument("--output-json", help="write the figures as JSON to this file")


def run(args: argparse.Namespace) -> int:
    args.api_key = args.api_key or os.environ.get("ANYDEV_API_KEY")
    info = _get(args, "/v1/models")["data"]
    model = args.model or info[0]["id"]
    prompts = random_prompts(args.num_prompts, args.input_len, args.vocab_size, args.seed)
    results, duration = asyncio.run(_send_all(args, model, prompts))
    figures = serve_figures(results, duration)
    print_block("Serving Benchmark Result", [
        ("Successful requests", figures["completed"]), ("Failed requests", figures["failed"]),
        ("Benchmark duration (s)", duration), ("Total input tokens", figures["total_input_tokens"]),
        ("Total generated tokens", figures["total_output_tokens"]),
        ("Request throughput (req/s)", figures["request_throughput"]),
        ("Output token throughput (tok/s)", figures["output_throughput"]),
        ("Total Token throughput (tok/s)", figures["total_token_throughput"]),
        *_section("Time to First Token", "TTFT", "ttft", figures),
        *_section("Time per Output Token (excl. 1st token)", "TPOT", "tpot", figures),
        *_section("Inter-token Latency", "ITL", "itl", figures)])
    for error in figures["errors"]:
        print(f"failed: {error}")
    write_json(args.output_json, dict(figures, model=model, num_prompts=args.num_prompts, input_len=args.input_len,
                                      output_len=args.output_len, request_rate=str(args.request_rate)))
    return 0 if figures["failed"] == 0 else 1


def serve_figures(results: list[Result], duration: float) -> dict:
    """vLLM's serving figures of ``results`` over ``duration`` seconds (times in ms), from the
    requests that completed."""
    ok = [r for r in results if r.ok]
    ttft = [r.ttft * 1000 for r in ok if r.ttft is not None]
    tpot = [(r.latency - r.ttft) * 1000 / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    itl = [x * 1000 for r in ok for x in r.itl]
    input_tokens, output_tokens = sum(r.prompt_tokens for r in ok), sum(r.output_tokens for r in ok)
    figures = dict(duration=duration, completed=len(ok), failed=len(results) - len(ok),
                   errors=[r.error for r in results if not r.ok][:3],
                   total_input_tokens=input_tokens, total_output_tokens=output_tokens,
                   request_throughput=len(ok) / duration, output_throughput=output_tokens / duration,
                   total_token_throughput=(input_tokens + output_tokens) / duration)
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl)):
        figures.update({f"mean_{name}_ms": mean(values), f"median_{name}_ms": percentile(values, 50),
                        f"p99_{name}_ms": percentile(values, 99)})
    return figures


def _section(title: str, label: str, key: str, figures: dict) -> list:
    return [(title, None), (f"Mean {label} (ms)", figures[f"mean_{key}_ms"]),
            (f"Median {label} (ms)", figures[f"median_{key}_ms"]), (f"P99 {label} (ms)", figures[f"p99_{key}_ms"])]


def _get(args: argparse.Namespace, path: str) -> dict:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    request = urllib.request.Request(f"http://{args.host}:{args.port}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


async def _send_all(args: argparse.Namespace, model: str, prompts: list[list[int]]) -> tuple[list[Result], float]:
    rng = random.Random(args.seed)
    bound = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None

    async def one(at: float, prompt: list[int]) -> Result:
        await asyncio.sleep(at)
        if bound is None:
            return await stream_request(args.port, prompt, args.output_len, model, args.host, args.api_key)
        async with bound:
            return await stream_request(args.port, prompt, args.output_len, model, args.host, args.api_key)

    at, arrivals = 0.0, []
    for _ in prompts:
        arrivals.append(at)
        at += rng.expovariate(args.request_rate) if args.request_rate != float("inf") else 0.0
    start = time.perf_counter()
    results = await asyncio.gather(*(one(a, p) for a, p in zip(arrivals, prompts)), return_exceptions=True)
    duration = time.perf_counter() - start
    return [r if isinstance(r, Result) else Result(error=repr(r)) for r in results], duration
