"""Decode speed with a JSON schema on every request beside the same run without, one engine, side by side.

    python benchmarks/structured_bench.py --device nvidia --batch 32 --new-tokens 128 --out r/structured.json
    python benchmarks/structured_bench.py --tiny --batch 8 --new-tokens 16          # cpu smoke

The model is Llama-shaped with random weights (--shape: 1b, the default, or 8b; --tiny: hidden 64, 2 layers),
its tokenizer a byte-level BPE of --vocab tokens trained at start on the Python standard library's
sources (a real vocabulary's size and pieces: the mask's cost grows with them; the model's vocab is
the tokenizer's). --batch prompts of --prompt-len random tokens decode exactly --new-tokens tokens
(no EOS), once unconstrained and once with ``structured`` a JSON schema (a list of records whose
strings are bounded, so the grammar keeps moving through keys, numbers and nesting), for --repeats
rounds in alternating order. The masks are computed on the sampling rank after each step's forward
is launched (core/sched/grammar_matchers.py). Reported: each mode's median decode tok/s and their
ratio, and that every constrained answer is a prefix of JSON the schema accepts (checked by
llguidance on the tokens). ``--host-steps N`` also times the host's share alone, no model: the
engine's grammar matchers (core/sched/grammar_matchers.py) for --batch rows over N steps, each step
filling the rows' masks and then feeding each row a token its mask allows (catch_up), in ms a step:
the work that must fit beside a step's forward for the device not to wait.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sysconfig
import time

import numpy as np

import torch

from anydev.core import InferEngine, SamplingParams
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.exits import run_command
from anydev.core.loading.checkpoint import Checkpoint
from anydev.core.loading.random_weights import LLAMA_1B, LLAMA_8B, LLAMA_TINY, RandomStore, llama_config
from anydev.core.loading.tokenizer import Tokenizer
from anydev.core.sched.grammar_matchers import GrammarMatchers
from anydev.core.sched.structured import StructuredOutput, library

#: --shape: 1b (its step is host-bound at batch 32: the masks' host work shows) or 8b.
SHAPES = {"1b": LLAMA_1B, "8b": LLAMA_8B}
CASE_FIELDS = ("max_model_len", "max_num_seqs", "enable_prefix_caching", "max_num_batched_tokens")
SCHEMA = {"type": "array", "minItems": 1, "items": {
    "type": "object", "additionalProperties": False, "required": ["id", "name", "score", "tags"],
    "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 12},
                   "score": {"type": "number"}, "active": {"type": "boolean"},
                   "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 8}}}}}
EOS = "<|end|>"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p.add_argument_group("engine"), exclude=CASE_FIELDS)
    p.set_defaults(device="cpu", tp=1, block_size=16, kernels="native")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--vocab", type=int, default=32000, help="the BPE tokenizer's size (the model's vocab)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shape", default="1b", choices=tuple(SHAPES),
                   help="the random model's Llama shape (its vocab is --vocab's tokenizer's)")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--host-steps", type=int, default=0, help="also time the host's mask work over this many steps")
    p.add_argument("--out")
    return p.parse_args(argv)


def stdlib_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE of ``vocab_size`` tokens (EOS among them) trained on the standard library's sources."""
    from tokenizers import Tokenizer as Backend, decoders, models, pre_tokenizers, trainers

    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train(files, trainer)
    return Tokenizer(backend, special_tokens={"eos_token": EOS}, eos_token_ids=[backend.token_to_id(EOS)])


def run(args) -> int:
    tokenizer = stdlib_tokenizer(args.vocab)
    shape = {**SHAPES[args.shape], **(LLAMA_TINY if args.tiny else {}), "vocab_size": tokenizer.vocab_size}
    longest = args.prompt_len + args.new_tokens + 16
    config = llama_config(max_position_embeddings=longest, **shape)
    checkpoint = Checkpoint(config, tokenizer, RandomStore(config), "random weights, stdlib BPE tokenizer")
    prompts = torch.randint(1, shape["vocab_size"], (args.batch, args.prompt_len),
                            generator=torch.Generator().manual_seed(0)).tolist()
    engine_config = engine_config_from_args(args, max_model_len=longest, max_num_seqs=args.batch,
                                            enable_prefix_caching=False, max_num_batched_tokens=max(2048, args.prompt_len))
    structured = StructuredOutput("json", json.dumps(SCHEMA))
    modes = {"plain": None, "json_schema": structured}
    speeds = {name: [] for name in modes}
    valid = True
    eos = set(tokenizer.eos_token_ids)
    lltokenizer = library().LLTokenizer(tokenizer.backend.to_str(), eos_token=list(eos))
    with InferEngine(checkpoint, engine_config) as engine:
        engine.generate_ids(prompts[:2], SamplingParams(max_new_tokens=4, ignore_eos=True, structured=structured))
        for round_ in range(args.repeats):
            for name in (list(modes) if round_ % 2 == 0 else list(modes)[::-1]):
                sampling = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True, structured=modes[name])
                outputs = engine.generate_ids(prompts, sampling)
                if any(len(o.token_ids) != args.new_tokens for o in outputs):
                    raise RuntimeError("a request did not decode --new-tokens tokens")
                if modes[name] is not None:
                    valid &= all(_accepted(lltokenizer, eos, structured, o.token_ids) for o in outputs)
                speeds[name].append(engine.last_stats.decode_tokens_per_s)
    medians = {name: statistics.median(v) for name, v in speeds.items()}
    plain, constrained = medians.values()
    report = {"device": args.device, "batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
              "vocab": tokenizer.vocab_size, "shape": "tiny" if args.tiny else args.shape, "schema": SCHEMA,
              "decode_tokens_per_s": medians, "rounds": speeds, "answers_follow_the_schema": valid,
              "ratio_json_schema_over_plain": constrained / plain if plain else None}
    for name, value in medians.items():
        print(f"{name:>12}: {value:10.1f} decode tok/s (rounds: {', '.join(f'{v:.1f}' for v in speeds[name])})")
    print(f"json_schema / plain: {report['ratio_json_schema_over_plain']:.3f} (batch {args.batch}, vocab "
          f"{tokenizer.vocab_size}); every answer follows the schema: {'yes' if valid else 'NO'}")
    if args.host_steps:
        report["host_ms_per_step"] = host_cost(tokenizer, structured, args.batch, args.host_steps)
        cost = report["host_ms_per_step"]
        print(f"host, {args.batch} rows: fill {cost['fill']:.3f} ms a step, catch_up {cost['catch_up']:.3f} ms "
              f"({os.cpu_count()} cpus; every fed token accepted: {'yes' if cost['accepted'] else 'NO'})")
        valid &= cost["accepted"]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if valid else 1


def host_cost(tokenizer: Tokenizer, structured: StructuredOutput, rows: int, steps: int) -> dict:
    """The engine's matchers for ``rows`` rows of ``structured``: ms a step to fill their masks and to
    feed each row a token its mask allows (a seeded choice), and whether every token was accepted."""
    matchers = GrammarMatchers(tokenizer, tokenizer.vocab_size)
    constrained = [(row, structured) for row in range(rows)]
    masks = np.zeros((rows, matchers.words), dtype=np.int32)
    matchers.fill(constrained, masks)          # untimed: builds the llguidance tokenizer and the matchers
    choose = random.Random(0)
    fill = catch_up = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        matchers.fill(constrained, masks)
        fill += time.perf_counter() - start
        allowed = np.unpackbits(masks.view(np.uint8), axis=1, bitorder="little")[:, :tokenizer.vocab_size]
        tokens = [choose.choice(ids) if (ids := np.flatnonzero(row).tolist()) else -1 for row in allowed]   # -1: none
        matchers.sampled("step", [(row, row) for row in range(rows)])
        start = time.perf_counter()
        matchers.catch_up(lambda ticket: tokens)
        catch_up += time.perf_counter() - start
    accepted = all(matchers.rejection(row) is None for row in range(rows))
    return {"fill": 1e3 * fill / steps, "catch_up": 1e3 * catch_up / steps, "steps": steps, "accepted": accepted}


def _accepted(lltokenizer, eos: set[int], structured: StructuredOutput, ids: list[int]) -> bool:
    """Whether a fresh matcher takes every token of ``ids`` (up to the grammar's end; EOS after it)."""
    matcher = library().LLMatcher(lltokenizer, structured.grammar(), log_level=0)
    for token in ids:
        if matcher.is_stopped():
            return token in eos
        if not matcher.consume_token(token):
            return False
    return True


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
