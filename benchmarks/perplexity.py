"""Perplexity of a fixed text through anydev's engine, weight format against weight format, in one run.

    python benchmarks/tiny_llama.py /tmp/tiny-llama                 # a model (and its GGUF files) to score
    python benchmarks/perplexity.py --model /tmp/tiny-llama --gguf /tmp/tiny-llama/q8_0.gguf,/tmp/tiny-llama/q4_k.gguf
    python benchmarks/perplexity.py --device nvidia --model /tmp/tiny-llama --gguf ... --out ppl.json

Each form is its own engine (one rank, bfloat16, the backend's kernels): the bf16 checkpoint as stored
("none"), quantized per channel while it loads ("int8", "fp8"), and each GGUF file with its blocks kept
(as stored) and dequantized to bfloat16 on the device ("dequantize": the same numbers without the
quantized kernels). The text (:func:`tiny_llama.corpus` with the held-out seed, unless ``--text`` names
a file) is cut into windows of ``--window`` tokens; every token after a window's first is scored by a
teacher-forced pass (``LlamaRank.token_logits``). Perplexity is exp of the mean negative
log-likelihood; each ratio is over the bf16 checkpoint's (the issue's bar for int8/fp8: <= 1.02).
``--reference`` also scores the checkpoint with transformers in float32 on the CPU: the engine's bf16
number should sit beside it (the scoring itself is right).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from anydev.core import EngineConfig, InferEngine
from anydev.core.models.batch import StepBatch
from anydev.core.exits import exit_process, run_command

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_llama  # noqa: E402  (beside this file)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an HF checkpoint directory (bf16)")
    p.add_argument("--gguf", default="", help="GGUF files of the same model, comma-separated")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quantizations", default="none,int8,fp8", help="of the HF checkpoint, comma-separated")
    p.add_argument("--text", type=Path, help="score this text file (default: tiny_llama's held-out text)")
    p.add_argument("--sentences", type=int, default=2000, help="sentences of the held-out text")
    p.add_argument("--window", type=int, default=256, help="tokens per teacher-forced pass")
    p.add_argument("--reference", action="store_true", help="also score with transformers, float32, on the CPU")
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def windows(ids: list[int], window: int) -> list[list[int]]:
    """``ids`` as passes of ``window`` + 1 tokens, each overlapping the next by one (so every token but
    the first is scored once, with the tokens before it in its window as context)."""
    return [ids[start:start + window + 1] for start in range(0, len(ids) - 1, window)]


def teacher_forced_step(tokens: list[int], block_size: int) -> StepBatch:
    """One sequence's prefill of ``tokens`` from position 0, in KV blocks 0, 1, ... of the rank."""
    T = len(tokens)
    blocks = -(-T // block_size)
    return StepBatch.pack(dict(
        input_ids=np.asarray(tokens), positions=np.arange(T), slot_mapping=np.arange(T),
        last_index=np.array([T - 1]), cu_seqlens_q=np.array([0, T]), seq_lens=np.array([T]),
        block_tables=np.arange(blocks)[None, :]), max_q_len=T)


def engine_nll(engine: InferEngine, passes: list[list[int]], block_size: int) -> float:
    """The summed negative log-likelihood of every scored token, on the engine's (only) rank."""
    worker = engine.workers[0]

    def score(tokens: list[int]) -> float:
        with worker.stream.torch_stream():
            step = teacher_forced_step(tokens, block_size).to(worker.device.torch_device)
            logp = torch.log_softmax(worker.model.token_logits(step)[:-1].float(), dim=-1)
            targets = torch.tensor(tokens[1:], device=logp.device)
            return float(-logp.gather(1, targets[:, None]).sum().to("cpu"))

    return sum(worker.submit(score, tokens).result() for tokens in passes)


def reference_nll(model_dir: str, passes: list[list[int]]) -> float:
    """The same passes through transformers' LlamaForCausalLM, float32, on the CPU."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total = 0.0
    with torch.inference_mode():
        for tokens in passes:
            ids = torch.tensor([tokens])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
            total += float(-logp.gather(1, ids[0, 1:, None]).sum())
    return total


def run(args) -> int:
    text = args.text.read_text() if args.text else tiny_llama.corpus(tiny_llama.HELD_OUT_SEED, args.sentences)
    ids = tiny_llama.token_ids(text)
    passes = windows(ids, args.window)
    scored = sum(len(p) - 1 for p in passes)
    block_size = 16
    forms = [(args.model, q) for q in args.quantizations.split(",") if q]
    forms += [(path, q) for path in args.gguf.split(",") if path for q in ("none", "dequantize")]
    print(f"text: {len(text)} characters, {len(ids)} tokens, {len(passes)} passes of <= {args.window + 1}; "
          f"{scored} tokens scored; device {args.device}, bfloat16")
    rows = []
    for path, quantization in forms:
        config = EngineConfig(device=args.device, dtype="bfloat16", quantization=None if quantization == "none" else quantization,
                              use_graphs=False, block_size=block_size, num_blocks=-(-(args.window + 1) // block_size) + 1,
                              max_model_len=args.window + 1)
        start = time.perf_counter()
        with InferEngine(path, config) as engine:
            nll = engine_nll(engine, passes, block_size)
            weights = engine.weight_descriptions[0].split(": ", 1)[1]
        rows.append(dict(model=path, quantization=quantization, weights=weights, nll=nll,
                         perplexity=math.exp(nll / scored), seconds=time.perf_counter() - start))
        print(f"  {Path(path).name} {quantization}: perplexity {rows[-1]['perplexity']:.4f} ({weights})", flush=True)
    base = next(r["perplexity"] for r in rows if r["model"] == args.model and r["quantization"] == "none")
    reference = math.exp(reference_nll(args.model, passes) / scored) if args.reference else None
    print(f"\n{'model':>18}  {'weights':>11}  {'perplexity':>10}  {'/ bf16':>7}  device weights")
    for r in rows:
        r["ratio"] = r["perplexity"] / base
        print(f"{Path(r['model']).name:>18}  {r['quantization']:>11}  {r['perplexity']:>10.4f}  {r['ratio']:>6.4f}x  {r['weights']}")
    if reference is not None:
        print(f"{'transformers fp32':>18}  {'(cpu)':>11}  {reference:>10.4f}  {reference / base:>6.4f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(command=" ".join(sys.argv), device=args.device, tokens_scored=scored,
                                                  window=args.window, reference_perplexity=reference, forms=rows), indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    exit_process(main())
