"""Greedy decode of the tiny trained Llama's GGUF files (benchmarks/tiny_llama.py) with the blocks kept
(batch-1 decode steps through the integer-dot GEMVs) and dequantized to bfloat16 on the device (the
same weights through bf16 GEMMs): how many of 64 new tokens agree, per file and prompt.

    python3 greedy_int_dot.py DIR [DEVICE]
"""
import sys
from pathlib import Path

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import open_checkpoint

folder, device = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "nvidia")
for file in sorted(folder.glob("*.gguf")):
    tokens = {}
    for quantization in (None, "dequantize"):
        config = EngineConfig(device=device, max_model_len=256, max_num_seqs=1, quantization=quantization)
        with InferEngine(open_checkpoint(file), config) as engine:
            tokenizer = engine.checkpoint.tokenizer
            prompts = [tokenizer.encode(text) for text in ("one two three four", "the cat sat on", "seven plus one is")]
            sampling = SamplingParams(max_new_tokens=64, ignore_eos=True, temperature=0.0)
            tokens[quantization] = [engine.generate_ids([p], sampling)[0].token_ids for p in prompts]
    agree = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x)) for x, y in zip(tokens[None], tokens["dequantize"])]
    print(f"{file.name}: tokens agreeing before the first difference, of 64, per prompt: {agree}", flush=True)
