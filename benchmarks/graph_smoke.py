"""Device-graph smoke check on a GPU backend: greedy float32 tokens with decode graphs == eager.

    python benchmarks/graph_smoke.py --device nvidia            # TP=1 and TP=2 when 2+ devices are visible
    python benchmarks/graph_smoke.py --device nvidia --tp 1 --skip-1b

For the embedded demo model and a random-weight ~1B Llama, at each TP size, the same prompts run
through an engine with decode graphs and one with ``use_graphs=False`` (``--enforce-eager``), and the
tokens are compared: one line per case ending in yes/no, exit 1 on any no. The prompts exercise what
graphs add: three sequences of unequal lengths (padded to the batch bucket of 4) and a single one,
block tables of the full width, and a sequence that ends early.

Graphs pad a step to its bucket, so the matmuls run on more rows than the eager step (other GEMM
tilings); on random weights (flat logits, near ties) that may legitimately flip a late greedy token.
The first differing position is printed: an early one (token 0-2) points at a real bug.
"""
from __future__ import annotations

import argparse

import torch

from anydev.core import EngineConfigError, InferEngine, SamplingParams
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.exits import exit_process, run_command
from anydev.core.loading.random_weights import llama_config, random_checkpoint
from anydev.plugin_api import load_backend

NEW_TOKENS = 48
#: The settings each case sets itself (--tp is a list here; float32 and the sizes the prompts need).
CASE_FIELDS = ("tp", "dtype", "max_num_seqs", "max_model_len", "use_graphs")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p.add_argument_group("engine"), exclude=CASE_FIELDS, defaults=dict(device="nvidia"))
    p.add_argument("--tp", default=None, help="comma-separated TP sizes (default: 1 and 2 when 2+ devices)")
    p.add_argument("--skip-1b", action="store_true", help="check the demo model only")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def run(args) -> int:
    backend = load_backend(args.device)
    if not backend.supports("torch_graph"):
        raise EngineConfigError(f"backend '{args.device}' has no device graphs (torch_graph): nothing to check")
    count = backend.device_count()
    tps = [int(t) for t in args.tp.split(",")] if args.tp else [1] + ([2] if count >= 2 else [])
    models = [("demo", demo_checkpoint())]
    if not args.skip_1b:
        models.append(("random ~1B", random_checkpoint(llama_config(max_position_embeddings=256))))
    all_match = True
    for name, checkpoint in models:
        prompts = _prompts(checkpoint.config.vocab_size)
        for tp in tps:
            for label, batch in (("3 seqs", prompts), ("1 seq", prompts[1:2])):
                eager, _ = _tokens(checkpoint, args, tp, batch, use_graphs=False)
                graphs, buckets = _tokens(checkpoint, args, tp, batch, use_graphs=True)
                match = graphs == eager
                all_match &= match
                print(f"{name:>11}  tp={tp}  {label:>6}  float32  graphs == eager: {'yes' if match else 'no'}"
                      f"  (buckets captured: {buckets})", flush=True)
                for i, (got, want) in enumerate(zip(graphs, eager)):
                    if got != want:
                        first = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                        print(f"    sequence {i}: first difference at token {first}: graphs {got[first:first + 5]}, "
                              f"eager {want[first:first + 5]}")
    print(f"all cases match: {'yes' if all_match else 'no'}")
    return 0 if all_match else 1


def _prompts(vocab_size: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(3, vocab_size, (n,), generator=generator).tolist() for n in (5, 17, 40)]


def _tokens(checkpoint, args, tp: int, prompts, use_graphs: bool):
    """Greedy float32 tokens, and the buckets rank 0 captured (None when eager)."""
    # max_model_len stops the 40-token prompt after 32 new tokens, so the batch shrinks while the others go on.
    config = engine_config_from_args(args, tp=tp, dtype="float32", max_num_seqs=4, max_model_len=40 + NEW_TOKENS - 16,
                                     use_graphs=use_graphs)
    with InferEngine(checkpoint, config) as engine:
        if use_graphs and not engine.uses_graphs:
            raise EngineConfigError(f"backend '{config.device}' did not enable decode graphs")
        outputs = engine.generate_ids(prompts, SamplingParams(max_new_tokens=NEW_TOKENS))
        tokens = [o.token_ids for o in outputs]
        return tokens, engine.workers[0].graphs.buckets if use_graphs else None


if __name__ == "__main__":
    exit_process(main())
