"""Engine start-up: the parallel init (every rank at once, one async memset, one sync) against the
old serial one (ranks one by one, KV zeroed from host zeros with a sync per layer), same run, same
config. Llama-shaped model with random weights made in process; a big KV cache per rank.

    python benchmarks/init_bench.py --device nvidia --tp 8 --kv-gib-per-rank 40 --out results/init.json
    python benchmarks/init_bench.py --layers 2 --hidden 256 --kv-gib-per-rank 0.25     # cpu smoke run

Prints each mode's per-rank phase table, the serial/parallel ratio and the KV-zero bandwidth: bytes
over the host-measured 'kv zero' + 'sync' phases, and over the device-measured zeroing (timing events).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch

from anydev.core import EngineConfig, InferEngine, format_timeline
from anydev.core.engine import DTYPES
from anydev.core.errors import run_command
from anydev.core.kv_cache import KVLayout
from anydev.core.models.random_weights import add_shape_arguments, config_from_arguments, random_checkpoint
from anydev.core.models.sharding import check_tp, rank_shard
from anydev.core.timeline import PHASES, phase_seconds
from anydev.plugin_api import load_backend


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--dtype", default=None, help="default: bf16 on GPUs, float32 on cpu")
    add_shape_arguments(p)
    p.add_argument("--block-size", type=int, default=16)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--num-blocks", type=int, default=None, help="KV blocks per rank")
    size.add_argument("--kv-gib-per-rank", type=float, default=None, help="KV cache size per rank, GiB (default 1)")
    p.add_argument("--memory-fraction", type=float, default=0.95)
    p.add_argument("--repeat", type=int, default=1, help="runs per mode (alternating); the best is reported")
    p.add_argument("--no-warmup", action="store_true", help="let the first run also pay for device context creation")
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def run(args) -> int:
    model = config_from_arguments(args)
    check_tp(model, args.tp)
    checkpoint = random_checkpoint(model)
    backend = load_backend(args.device)
    dtype = DTYPES[args.dtype] if args.dtype else (torch.float32 if backend.torch_device_type == "cpu" else torch.bfloat16)
    block_bytes = KVLayout(model.num_hidden_layers, 1, args.block_size, rank_shard(model, args.tp, 0).num_kv_heads,
                           model.head_dim, dtype).block_bytes
    num_blocks = args.num_blocks or max(1, int((args.kv_gib_per_rank or 1.0) * 2**30) // block_bytes)
    config = dict(device=args.device, tp=args.tp, dtype=str(dtype).removeprefix("torch."), block_size=args.block_size,
                  num_blocks=num_blocks, memory_fraction=args.memory_fraction)
    print(f"model: {checkpoint!r}\nKV cache per rank: {num_blocks} blocks x {block_bytes} B = "
          f"{num_blocks * block_bytes / 2**30:.2f} GiB; {args.tp} rank(s) on {args.device}")
    if not args.no_warmup:   # create each device's context once, outside the timed runs
        for index in range(min(args.tp, backend.device_count())):
            backend.device(index).synchronize()

    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for mode in ("serial", "parallel"):
            result = measure(checkpoint, EngineConfig(init_mode=mode, **config))
            if mode not in best or result["init_seconds"] < best[mode]["init_seconds"]:
                best[mode] = result
    for mode in ("serial", "parallel"):
        r = best[mode]
        print(f"\n{mode} init: {r['init_seconds']:.3f} s")
        print(r["table"])
        for rank in r["ranks"]:
            print(f"  rank {rank['rank']}: KV zero {rank['kv_bytes'] / 2**30:.2f} GiB, host-timed "
                  f"{rank['zero_host_gbps']:.1f} GB/s, device-timed {rank['zero_device_gbps']:.1f} GB/s")
    ratio = best["serial"]["init_seconds"] / best["parallel"]["init_seconds"]
    print(f"\nserial / parallel init time: {ratio:.2f}x")
    if args.out:
        report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), host=platform.node(), command=" ".join(sys.argv),
                      config=config, model=_shape(model), ratio=ratio,
                      modes={m: {k: v for k, v in r.items() if k != "table"} for m, r in best.items()})
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    return 0


def measure(checkpoint, config: EngineConfig) -> dict:
    with InferEngine(checkpoint, config) as engine:
        records = engine.timeline
        t0 = min(r.start for r in records)
        ranks = []
        for rank, (nbytes, device_ms) in enumerate(zip(engine.kv_cache_bytes, engine.kv_zero_device_ms)):
            host_s = phase_seconds(records, rank, "kv zero") + phase_seconds(records, rank, "sync")
            ranks.append(dict(rank=rank, kv_bytes=nbytes, zero_host_gbps=nbytes / host_s / 1e9 if host_s else 0.0,
                              zero_device_gbps=nbytes / (device_ms / 1e3) / 1e9 if device_ms else 0.0,
                              phases_ms={p: phase_seconds(records, rank, p) * 1e3 for p in PHASES}))
        return dict(init_seconds=engine.init_seconds, table=format_timeline(records, t0), ranks=ranks,
                    records=[dict(rank=r.rank, phase=r.phase, start=r.start - t0, end=r.end - t0) for r in records])


def _shape(model) -> dict:
    return {k: getattr(model, k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                           "num_key_value_heads", "intermediate_size", "vocab_size")}


if __name__ == "__main__":
    sys.exit(main())
