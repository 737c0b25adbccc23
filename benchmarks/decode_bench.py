"""Prefill and decode tokens/s of the engine against HF transformers' generate, same weights, same run.

    python benchmarks/decode_bench.py --device nvidia --out results/decode.json       # ~1B llama shape
    python benchmarks/decode_bench.py --device nvidia --modes graphs                   # graphs only
    python benchmarks/decode_bench.py --layers 2 --prompt-len 16 --new-tokens 8        # cpu smoke run
    python benchmarks/decode_bench.py --tiny --prompt-len 256 --new-tokens 64 --skip-hf  # cpu: host cost per step

The model is Llama-shaped (default: hidden 2048, 16 layers, 32 heads, 8 KV heads, MLP 8192, vocab
32000) with random weights made in process; both sides generate greedily to exactly --new-tokens.
HF's prefill time is a generate() of one token; its decode rate is the rest of a full generate().
"step ms" is the wall time of one decode step; "build ms" is the engine's host-only share of it (making
the step's batch). With ``--tiny`` (a model far too small to keep any device busy) the step time is
almost all host overhead: Python, kernel launches, copies and syncs.

The engine runs in each of --modes: "graphs" (decode steps replayed as device graphs, where the
backend has them) and "eager" (as ``--enforce-eager``), side by side. Each batch size runs once
untimed first, so graph captures (one per batch/context bucket) are not in the timed run.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch

from anydev.core import EngineConfig, EngineConfigError, InferEngine, SamplingParams
from anydev.core.errors import run_command
from anydev.core.models.random_weights import LLAMA_1B, llama_config, random_checkpoint

#: A shape too small to keep any device busy: its decode step time is host overhead.
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--dtype", default=None, help="default: bf16 on GPUs, float32 on cpu")
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--layers", type=int, default=None, help="default: 16 (2 with --tiny)")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, vocab 256: measures host overhead")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--modes", default="graphs,eager", help="engine modes to run: graphs, eager (default both)")
    p.add_argument("--skip-hf", action="store_true", help="measure the engine only")
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def run(args) -> int:
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    args.layers = args.layers or (2 if args.tiny else LLAMA_1B["num_hidden_layers"])
    shape = dict(TINY if args.tiny else {}, num_hidden_layers=args.layers)
    model = llama_config(max_position_embeddings=args.prompt_len + args.new_tokens + 16, **shape)
    checkpoint = random_checkpoint(model)
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, model.vocab_size, (max(batch_sizes), args.prompt_len), generator=generator).tolist()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"graphs", "eager"}:
        raise EngineConfigError(f"--modes takes graphs and/or eager, got {args.modes!r}")
    rows = []
    for mode in modes:
        config = EngineConfig(device=args.device, tp=args.tp, dtype=args.dtype, block_size=args.block_size,
                              max_model_len=args.prompt_len + args.new_tokens + 1, max_num_seqs=max(batch_sizes),
                              use_graphs=mode == "graphs")
        with InferEngine(checkpoint, config) as engine:
            dtype = engine.dtype
            torch_device = engine.backend.device(0).torch_device
            print(f"model: {checkpoint!r}, {args.device} x {args.tp}, {str(dtype).removeprefix('torch.')}, {mode}")
            if mode == "graphs" and not engine.uses_graphs:
                print(f"  skipped: backend '{args.device}' has no device graphs (torch_graph)")
                continue
            for batch in batch_sizes:
                sampling = SamplingParams(max_new_tokens=args.new_tokens)
                engine.generate_ids(prompts[:batch], sampling)    # warm-up, graph captures included
                engine.generate_ids(prompts[:batch], sampling)
                s = engine.last_stats
                rows.append(dict(engine=f"anydev {mode}", batch=batch, prefill_tokens_per_s=s.prefill_tokens_per_s,
                                 decode_tokens_per_s=s.decode_tokens_per_s, decode_step_ms=s.decode_step_ms,
                                 decode_build_ms=s.decode_build_ms))
                print(_row(rows[-1]), flush=True)
            if engine.uses_graphs:
                print(f"  graph buckets captured (rows, context): {engine.workers[0].graphs.buckets}")
    if not args.skip_hf:
        rows += hf_rows(checkpoint, prompts, batch_sizes, args, torch_device, dtype)
    print()
    print(f"{'engine':>14}  {'batch':>5}  {'prefill tok/s':>13}  {'decode tok/s':>12}  {'step ms':>8}  {'build ms':>8}")
    for row in sorted(rows, key=lambda r: (r["batch"], r["engine"])):
        print(_row(row))
    if args.out:
        report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), host=platform.node(), command=" ".join(sys.argv),
                      device=args.device, tp=args.tp, dtype=str(dtype).removeprefix("torch."),
                      prompt_len=args.prompt_len, new_tokens=args.new_tokens, layers=args.layers, modes=modes, rows=rows)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    return 0


def hf_rows(checkpoint, prompts, batch_sizes, args, torch_device, dtype) -> list[dict]:
    """The same model in HF transformers (sdpa attention, its own KV cache), timed the same way."""
    import transformers

    c = checkpoint.config
    hf_config = transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        max_position_embeddings=c.max_position_embeddings, rope_theta=c.rope_theta, tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    with torch.device(torch_device):
        model = transformers.LlamaForCausalLM(hf_config).to(dtype).eval()
    model.load_state_dict({name: checkpoint.load(name) for name in checkpoint.tensor_names()})

    def timed_generate(ids: torch.Tensor, new_tokens: int) -> float:
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        out.tolist()   # waits for the device
        return time.perf_counter() - start

    rows = []
    with torch.inference_mode():
        timed_generate(torch.tensor(prompts[:1], device=torch_device), 4)   # warm-up
        for batch in batch_sizes:
            ids = torch.tensor(prompts[:batch], device=torch_device)
            prefill = timed_generate(ids, 1)
            full = timed_generate(ids, args.new_tokens)
            decode = max(full - prefill, 1e-9)
            rows.append(dict(engine="transformers", batch=batch,
                             prefill_tokens_per_s=batch * args.prompt_len / prefill,
                             decode_tokens_per_s=batch * (args.new_tokens - 1) / decode,
                             decode_step_ms=1000 * decode / (args.new_tokens - 1)))
            print(_row(rows[-1]), flush=True)
    return rows


def _row(row: dict) -> str:
    build = f"{row['decode_build_ms']:>8.3f}" if "decode_build_ms" in row else f"{'-':>8}"
    return (f"{row['engine']:>14}  {row['batch']:>5}  {row['prefill_tokens_per_s']:>13.1f}  "
            f"{row['decode_tokens_per_s']:>12.1f}  {row['decode_step_ms']:>8.3f}  {build}")


if __name__ == "__main__":
    sys.exit(main())
