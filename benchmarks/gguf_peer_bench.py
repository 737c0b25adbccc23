"""anydev beside llama.cpp on the same GGUF files, the same shape of work, one run: decode tok/s at each
batch size (default 1 and 32) with a 128-token prompt and 128 new tokens, and their ratio.

    python benchmarks/gguf_peer_bench.py /tmp/llama-8b-q4_k.gguf /tmp/llama-8b-q8_0.gguf --device nvidia \\
        --llamacpp /tmp/llamacpp-build --out peer.json
    python benchmarks/gguf_peer_bench.py /tmp/tiny.gguf --device cpu --skip-llamacpp --new-tokens 8   # smoke

llama.cpp (built by ``../shared/tools/llamacpp-peer.sh build`` on the GPU machine, or ``parts/peer_build.sh`` on a
CPU machine with CUDA's nvcc; ``--llamacpp`` is its build folder): its
``llama-batched-bench`` with ``-npp PROMPT -ntg NEW -npl 1,32`` (S_TG, the decode tok/s over all sequences;
flash attention, every layer on the GPU) and ``llama-bench -n NEW`` (tg128: batch 1 with no prompt, the
number llama.cpp users quote). anydev: ``InferEngine.generate_ids`` on the same file (its blocks kept as
stored, bfloat16 activations, decode graphs), random prompts of the same length, EOS ignored; decode tok/s
from the engine's step statistics, the median of ``--repeats`` timed runs after one untimed run.
``--plans FILE`` (a ``linear_bench.py --table-out`` file) runs anydev with those plans added to the recorded
ones. ``--ttft`` also times llama.cpp's start to its first token (the wall time of ``llama-bench -p 16 -n 1
-r 1``, which loads the file, builds the context and runs the one step).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="GGUF files (both engines run each)")
    p.add_argument("--device", default="nvidia")
    p.add_argument("--batch-sizes", type=lambda s: [int(b) for b in s.split(",")], default=[1, 32])
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="timed anydev runs per case (median)")
    p.add_argument("--llamacpp", type=Path, default=Path("/tmp/llamacpp-build"), help="llama.cpp's build folder")
    p.add_argument("--kernels", default="native", help="anydev's EngineConfig.kernels (native; unfused: every "
                                                       "fused kernel run as its parts)")
    p.add_argument("--skip-llamacpp", action="store_true")
    p.add_argument("--skip-anydev", action="store_true")
    p.add_argument("--ttft", action="store_true", help="also time llama-bench -p 16 -n 1 -r 1 (wall, seconds)")
    p.add_argument("--plans", action="append", default=[],
                   help="a linear_bench --table-out file whose plans anydev takes for this run (merged into "
                        "linear_plans.RECORDED): a sweep's plans end to end before they are pasted; repeatable")
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


# ---- llama.cpp ------------------------------------------------------------------------------------

def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def llamacpp_batched(build: Path, file: Path, batch_sizes, prompt_len: int, new_tokens: int) -> dict[int, float]:
    """S_TG (decode tok/s over all sequences) of llama-batched-bench per batch size."""
    context = max(batch_sizes) * (prompt_len + new_tokens) + 256
    out = _run([str(build / "bin" / "llama-batched-bench"), "-m", str(file), "-ngl", "99", "-fa", "on",
                "-c", str(context), "-b", "2048", "-ub", "512", "-npp", str(prompt_len), "-ntg", str(new_tokens),
                "-npl", ",".join(map(str, batch_sizes))])
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in out.splitlines()
            if line.startswith("|")]
    header = rows[0]
    speeds = {}
    for row in rows[1:]:
        if len(row) == len(header) and row[header.index("B")].isdigit():
            speeds[int(row[header.index("B")])] = float(row[header.index("S_TG t/s")])
    return speeds


def llamacpp_tg(build: Path, file: Path, new_tokens: int) -> float:
    """llama-bench's tg (batch 1, no prompt) tok/s, the mean of its 3 runs."""
    out = _run([str(build / "bin" / "llama-bench"), "-m", str(file), "-ngl", "99", "-fa", "1", "-p", "0",
                "-n", str(new_tokens), "-r", "3", "-o", "json"])
    return next(float(test["avg_ts"]) for test in json.loads(out) if test["n_gen"] == new_tokens)


def llamacpp_ttft(build: Path, file: Path) -> float:
    """Wall seconds of ``llama-bench -m FILE -p 16 -n 1 -r 1`` (start, load, one prompt, one token)."""
    start = time.perf_counter()
    _run([str(build / "bin" / "llama-bench"), "-m", str(file), "-p", "16", "-n", "1", "-r", "1"])
    return time.perf_counter() - start


# ---- anydev ---------------------------------------------------------------------------------------

def anydev_speeds(file: Path, device: str, batch_sizes, prompt_len: int, new_tokens: int, repeats: int,
                  kernels: str = "native") -> dict:
    """Decode tok/s per batch size (median of ``repeats``) and the engine's description."""
    import torch

    from anydev.core import EngineConfig, InferEngine, SamplingParams

    config = EngineConfig(device=device, max_model_len=prompt_len + new_tokens + 16, max_num_seqs=max(batch_sizes),
                          enable_prefix_caching=False, kernels=kernels)
    speeds = {}
    with InferEngine(str(file), config) as engine:
        vocab = engine.checkpoint.config.vocab_size
        generator = torch.Generator().manual_seed(0)
        prompts = torch.randint(2, vocab, (max(batch_sizes), prompt_len), generator=generator).tolist()
        sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
        for batch in batch_sizes:
            engine.generate_ids(prompts[:batch], sampling)                # untimed: warm-up
            runs = []
            for _ in range(repeats):
                engine.generate_ids(prompts[:batch], sampling)
                runs.append(engine.last_stats.decode_tokens_per_s)
            speeds[batch] = statistics.median(runs)
            print(f"  anydev {file.name} batch {batch}: {speeds[batch]:,.1f} tok/s (runs {', '.join(f'{r:,.1f}' for r in runs)})",
                  flush=True)
        description = dict(kernels=engine.kernels_description, weights=list(engine.weight_descriptions))
    return dict(speeds=speeds, **description)


# ---- report ---------------------------------------------------------------------------------------

def run(args) -> int:
    if args.plans:
        from linear_bench import merge_plans   # the script beside this one

        merge_plans(args.plans)
    results = []
    for file in args.files:
        row = dict(file=str(file), gigabytes=file.stat().st_size / 1e9)
        print(f"== {file} ({row['gigabytes']:.2f} GB)", flush=True)
        if not args.skip_llamacpp:
            row["llamacpp_batched"] = llamacpp_batched(args.llamacpp, file, args.batch_sizes, args.prompt_len,
                                                       args.new_tokens)
            row["llamacpp_tg"] = llamacpp_tg(args.llamacpp, file, args.new_tokens)
            print(f"  llama.cpp: tg{args.new_tokens} {row['llamacpp_tg']:,.1f} tok/s; batched S_TG "
                  + ", ".join(f"batch {b} {s:,.1f}" for b, s in row["llamacpp_batched"].items()), flush=True)
            if args.ttft:
                row["llamacpp_ttft_s"] = llamacpp_ttft(args.llamacpp, file)
                print(f"  llama.cpp llama-bench -p 16 -n 1 -r 1: {row['llamacpp_ttft_s']:.2f} s wall", flush=True)
        if not args.skip_anydev:
            row["anydev"] = anydev_speeds(file, args.device, args.batch_sizes, args.prompt_len, args.new_tokens,
                                          args.repeats, args.kernels)
        results.append(row)
    print(f"\n{'file':>28}  {'batch':>5}  {'llama.cpp S_TG':>14}  {'llama.cpp tg':>12}  {'anydev':>9}  "
          f"{'/ S_TG':>7}  {'/ tg':>6}")
    for row in results:
        for batch in args.batch_sizes:
            ours = row.get("anydev", {}).get("speeds", {}).get(batch)
            theirs = row.get("llamacpp_batched", {}).get(batch)
            tg = row.get("llamacpp_tg") if batch == 1 else None
            cells = [f"{v:>14,.1f}" if v else f"{'-':>14}" for v in (theirs,)] + \
                    [f"{tg:>12,.1f}" if tg else f"{'-':>12}", f"{ours:>9,.1f}" if ours else f"{'-':>9}",
                     f"{ours / theirs:>6.2f}x" if ours and theirs else f"{'-':>7}",
                     f"{ours / tg:>5.2f}x" if ours and tg else f"{'-':>6}"]
            print(f"{Path(row['file']).name:>28}  {batch:>5}  " + "  ".join(cells))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), command=" ".join(sys.argv),
                           prompt_len=args.prompt_len, new_tokens=args.new_tokens, rows=results), f, indent=1)
    return 0


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
