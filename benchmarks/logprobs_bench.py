"""Decode speed with logprobs on every request beside the same run without, one engine, side by side.

    python benchmarks/logprobs_bench.py --device nvidia --batch 256 --new-tokens 128 --out r/logprobs.json
    python benchmarks/logprobs_bench.py --tiny --batch 8 --new-tokens 8          # cpu smoke

The model is Llama-shaped with random weights (--shape: 1b, the default, or 8b; --tiny: hidden 64, 2 layers);
--batch prompts of --prompt-len random tokens decode exactly --new-tokens greedily (no EOS), once
with ``logprobs`` None and once with ``logprobs`` --logprobs on every request (the sampling rank
computes them in the step: see core/sched/logprobs.py), for --repeats rounds in alternating order.
Reported: each mode's median decode tok/s (the engine's pure decode steps) and their ratio.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from anydev.core import InferEngine, SamplingParams
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.loading.random_weights import LLAMA_1B, LLAMA_8B, LLAMA_TINY, llama_config, random_checkpoint
from anydev.core.exits import run_command

#: --shape: the Llama shapes a decode step's host work is measured beside (1b: host-bound at batch 64).
SHAPES = {"1b": LLAMA_1B, "8b": LLAMA_8B}
CASE_FIELDS = ("max_model_len", "max_num_seqs", "enable_prefix_caching", "max_num_batched_tokens")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p.add_argument_group("engine"), exclude=CASE_FIELDS)
    p.set_defaults(device="cpu", tp=1, block_size=16, kernels="native")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--logprobs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shape", default="1b", choices=tuple(SHAPES), help="the random model's Llama shape")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out")
    return p.parse_args(argv)


def run(args) -> int:
    shape = dict(SHAPES[args.shape], **(LLAMA_TINY if args.tiny else {}))
    longest = args.prompt_len + args.new_tokens + 16
    checkpoint = random_checkpoint(llama_config(max_position_embeddings=longest, **shape))
    prompts = torch.randint(2, shape["vocab_size"], (args.batch, args.prompt_len),
                            generator=torch.Generator().manual_seed(0)).tolist()
    config = engine_config_from_args(args, max_model_len=longest, max_num_seqs=args.batch, enable_prefix_caching=False,
                                     max_num_batched_tokens=max(2048, args.prompt_len))
    modes = {"plain": None, f"logprobs={args.logprobs}": args.logprobs}
    speeds = {name: [] for name in modes}
    with InferEngine(checkpoint, config) as engine:
        engine.generate_ids(prompts[:2], SamplingParams(max_new_tokens=4, ignore_eos=True, logprobs=args.logprobs))
        for round_ in range(args.repeats):
            for name in (list(modes) if round_ % 2 == 0 else list(modes)[::-1]):
                sampling = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True, logprobs=modes[name])
                outputs = engine.generate_ids(prompts, sampling)
                if modes[name] is not None and any(len(o.logprobs) != args.new_tokens for o in outputs):
                    raise RuntimeError("a request came back without its logprobs")
                speeds[name].append(engine.last_stats.decode_tokens_per_s)
    medians = {name: statistics.median(v) for name, v in speeds.items()}
    plain, asked = medians.values()
    report = {"device": args.device, "batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
              "shape": "tiny" if args.tiny else args.shape, "decode_tokens_per_s": medians, "rounds": speeds,
              "ratio_logprobs_over_plain": asked / plain if plain else None}
    for name, value in medians.items():
        print(f"{name:>12}: {value:10.1f} decode tok/s (rounds: {', '.join(f'{v:.1f}' for v in speeds[name])})")
    print(f"logprobs / plain: {report['ratio_logprobs_over_plain']:.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
