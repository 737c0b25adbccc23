"""``anydev bench latency``: one batch through the engine, end to end, as ``vllm bench latency``."""
from __future__ import annotations

import argparse
import time

from .engine_run import add_engine_arguments, generated_tokens, open_engine
from .figures import LATENCY_PERCENTILES, mean, percentile, random_prompts, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=int, default=8, help="prompts in the batch")
    parser.add_argument("--num-iters-warmup", type=int, default=10, help="untimed runs first")
    parser.add_argument("--num-iters", type=int, default=30, help="timed runs")
    add_engine_arguments(parser, input_len=32, output_len=128)


def run(args: argparse.Namespace) -> int:
    from anydev.core import SamplingParams

    engine, vocab = open_engine(args, args.batch_size)
    with engine:
        prompts = random_prompts(args.batch_size, args.input_len, vocab, args.seed)
        sampling = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
        for _ in range(args.num_iters_warmup):
            engine.generate_ids(prompts, sampling)
        latencies, output_tokens = [], []
        for _ in range(args.num_iters):
            start = time.perf_counter()
            outputs = engine.generate_ids(prompts, sampling)
            latencies.append(time.perf_counter() - start)
            output_tokens.append(generated_tokens(outputs))
    percentiles = {str(q): percentile(latencies, q) for q in LATENCY_PERCENTILES}
    print(f"Avg latency: {mean(latencies)} seconds")
    for q, value in percentiles.items():
        print(f"{q}% percentile latency: {value} seconds")
    write_json(args.output_json, dict(avg_latency=mean(latencies), latencies=latencies, percentiles=percentiles,
                                      batch_size=args.batch_size, input_len=args.input_len,
                                      output_len=args.output_len, output_tokens_per_iter=output_tokens))
    return 0
