"""``anydev bench throughput``: many prompts through the engine at once, as ``vllm bench throughput``."""
from __future__ import annotations

import argparse
import time

from .engine_run import add_engine_arguments, generated_tokens, open_engine
from .figures import random_prompts, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-prompts", type=int, default=1000, help="prompts, all given to the engine at once")
    add_engine_arguments(parser, input_len=128, output_len=128)


def run(args: argparse.Namespace) -> int:
    from anydev.core import SamplingParams

    engine, vocab = open_engine(args, min(args.num_prompts, 256))
    with engine:
        prompts = random_prompts(args.num_prompts, args.input_len, vocab, args.seed)
        start = time.perf_counter()
        outputs = engine.generate_ids(prompts, SamplingParams(max_new_tokens=args.output_len, ignore_eos=True))
        elapsed = time.perf_counter() - start
    prompt_tokens = sum(len(p) for p in prompts)
    output_tokens = generated_tokens(outputs)
    total = prompt_tokens + output_tokens
    print(f"Throughput: {len(prompts) / elapsed:.2f} requests/s, {total / elapsed:.2f} total tokens/s, "
          f"{output_tokens / elapsed:.2f} output tokens/s")
    print(f"Total num prompt tokens:  {prompt_tokens}")
    print(f"Total num output tokens:  {output_tokens}")
    write_json(args.output_json, dict(elapsed_time=elapsed, num_requests=len(prompts), total_num_tokens=total,
                                      num_prompt_tokens=prompt_tokens, num_output_tokens=output_tokens,
                                      requests_per_second=len(prompts) / elapsed, tokens_per_second=total / elapsed,
                                      output_tokens_per_second=output_tokens / elapsed))
    return 0
