"""``anydev bench latency|throughput|serve``: vLLM's three benchmarks, printing what ``vllm bench``
prints and, with ``--output-json``, writing the same figures as JSON.

- ``latency`` (:mod:`.latency`): one batch of random prompts through the engine in this process,
  timed end to end over ``--num-iters`` runs after ``--num-iters-warmup``: the average and percentiles;
- ``throughput`` (:mod:`.throughput`): ``--num-prompts`` random prompts through the engine at once:
  requests/s, tokens/s;
- ``serve`` (:mod:`.serve`): ``--num-prompts`` streamed requests against a running ``anydev serve``:
  request throughput, output tok/s, TTFT / TPOT / ITL mean, median and p99 (the client that
  benchmarks/serve_bench.py drives too).
"""
from __future__ import annotations

import argparse

from . import latency, serve, throughput

KINDS = {"latency": (latency, "end-to-end latency of one batch through the engine (in this process)"),
         "throughput": (throughput, "requests/s and tokens/s of many prompts through the engine (in this process)"),
         "serve": (serve, "a running 'anydev serve' under streamed load: throughput, TTFT, TPOT, ITL")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    for name, (module, help) in KINDS.items():
        module.add_arguments(kinds.add_parser(name, help=help, description=help,
                                              formatter_class=argparse.ArgumentDefaultsHelpFormatter))


def run(args: argparse.Namespace) -> int:
    return KINDS[args.bench][0].run(args)
