"""The GGUF tokenizer's start-up cost at Llama-3's size: a GGUF file with a byte-level BPE vocabulary of
128,256 tokens and 280,147 merges (Llama-3's counts; the tokens are made up, not Llama-3's), then its
tokenizer built from the metadata, phase by phase.

    python benchmarks/gguf_tokenizer_bench.py /tmp/llama3-vocab.gguf             # writes the file once
    python benchmarks/gguf_tokenizer_bench.py /tmp/llama3-vocab.gguf --out tok.json

Phases (seconds, each run in a fresh process so that nothing is warm but the page cache): "open" the
GGUF reader, "metadata" the fields as Python values, "tokenizer" the Tokenizer built from them, and
"open_checkpoint" the whole ``open_checkpoint`` again (reader, config and tokenizer); each also as the
process's CPU seconds ("open cpu", ...).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

#: Llama-3's vocabulary: 128,000 BPE tokens, 256 reserved special tokens, 280,147 merges.
BPE_TOKENS, SPECIAL_TOKENS, MERGES = 128_000, 256, 280_147


def byte_alphabet() -> list[str]:
    """GPT-2's byte-level alphabet: one printable character per byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def drawn_vocabulary(seed: int = 0) -> tuple[list[str], list[str]]:
    """Tokens and merges ("a b": both parts and the result tokens) of Llama-3's counts: the 256 bytes,
    every string of 2 and 3 letters of a 27-letter alphabet, drawn strings of 4, then every merge that
    splits a token in two tokens, shortest tokens first, up to the count."""
    rng = random.Random(seed)
    tokens = byte_alphabet()
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u0120"]   # "Ġ": byte-level's space
    tokens += [a + b for a in letters for b in letters]
    tokens += [a + b + c for a in letters for b in letters for c in letters]
    known = set(tokens)
    while len(tokens) < BPE_TOKENS:
        token = "".join(rng.choice(letters) for _ in range(4))
        if token not in known:
            tokens.append(token)
            known.add(token)
    merges = [f"{t[:cut]} {t[cut:]}" for t in tokens[256:] for cut in range(1, len(t))]
    return tokens, merges[:MERGES]


def write_file(path: Path) -> None:
    """A llama GGUF of 2 tiny layers whose tokenizer is :func:`drawn_vocabulary` plus the special tokens."""
    import numpy as np

    from anydev.core.loading.gguf_loader import gguf_name
    from anydev.core.loading.gguf_writing import gguf_model_writer, write_gguf
    from anydev.core.loading.random_weights import RandomStore, llama_config

    tokens, merges = drawn_vocabulary()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(SPECIAL_TOKENS - 2)]
    config = llama_config(vocab_size=len(tokens) + len(specials), hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    writer = gguf_model_writer(path, "llama", config, rope_theta=config.rope_theta, head_dim=config.head_dim)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens + specials)
    writer.add_token_types([1] * len(tokens) + [3] * len(specials))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(len(tokens))
    writer.add_eos_token_id(len(tokens) + 1)
    store = RandomStore(config, 0)
    for name in store.shapes:
        writer.add_tensor(gguf_name(name), store.load(name).numpy().astype(np.float16 if name.endswith("embed_tokens.weight") else np.float32))
    write_gguf(writer)


def time_phases(path: str) -> dict:
    """One fresh process's phases (run as ``--phases PATH``): wall seconds, and the process's CPU seconds
    as ``<phase> cpu`` (on a shared host the wall time holds the other processes' turns too)."""
    phases = {}
    wall, cpu = time.perf_counter(), time.process_time()

    def mark(phase: str) -> None:
        nonlocal wall, cpu
        phases[phase], phases[f"{phase} cpu"] = time.perf_counter() - wall, time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()

    from anydev.core.loading import gguf_loader
    mark("imports")
    reader = gguf_loader._open_reader(Path(path))
    mark("open")
    meta = gguf_loader.read_metadata(reader)
    mark("metadata")
    tokenizer = gguf_loader.gguf_tokenizer(meta, path)
    mark("tokenizer")
    from anydev.core.loading.checkpoint import open_checkpoint

    open_checkpoint(path).close()
    mark("open_checkpoint")
    phases["vocab"] = tokenizer.vocab_size
    return phases


def run_fresh(path: Path, env: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, str(path), "--phases"], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the timed process failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gguf", type=Path, help="the GGUF file (written first when it does not exist)")
    p.add_argument("--runs", type=int, default=3, help="timed runs of each kind (default 3)")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    p.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phases:
        print(json.dumps(time_phases(str(args.gguf))))
        return 0
    if not args.gguf.exists():
        at = time.perf_counter()
        write_file(args.gguf)
        print(f"wrote {args.gguf} ({args.gguf.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - at:.1f} s")
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "host": platform.node(),
              "command": shlex.join([sys.executable, *sys.argv]), "file": str(args.gguf), "runs": []}
    for _ in range(args.runs):
        row = run_fresh(args.gguf, dict(os.environ))
        report["runs"].append(row)
        print(", ".join(f"{k} {v:.3f} s" for k, v in row.items() if isinstance(v, float)), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
