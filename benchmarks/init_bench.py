"""Engine start-up from a real checkpoint: each rank alone against all ranks together, in one run.

    python benchmarks/make_random_model.py /tmp/llama-8b --hidden 4096 --layers 32 --heads 32 --kv-heads 8 \\
        --intermediate 14336 --vocab 128256
    python benchmarks/init_bench.py --device nvidia --tp 2 --model /tmp/llama-8b --kv-gib-per-rank 40 --out init.json
    python benchmarks/init_bench.py --layers 2 --hidden 256 --kv-gib-per-rank 0.25    # cpu smoke run, random weights

In order, all in one process:
1. the limits, measured here: the host's memory bandwidth (a copy, one thread and every core) and
   the pinned host->device copy bandwidth of each device alone and of all together;
2. the page cache warmed: every weight file read once (timed, so a cold first read shows);
3. the weight load alone: each rank's shard loaded by itself, one rank after another, then all ranks
   at once, with per-rank and total GB/s (stored bytes over the load's time, until its last copy is done);
4. the engine's init in three modes: "serial" (ranks one by one, KV zeroed from host
   zeros with a sync per layer), "sequential" (ranks one by one, each as parallel runs it: each rank
   alone) and "parallel" (every rank at once), with each one's per-rank phase table and load stats;
   and the two rows that attribute the serial -> parallel gain, each changing one of the two at a
   time: "serial+memset" (ranks one by one, KV zeroed by one device memset) and "parallel+host-zero"
   (every rank at once, KV zeroed from host zeros layer by layer).
Ratios: parallel init wall over the slowest rank alone (sequential mode's longest rank span), and
serial over each other mode.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import torch

from anydev.conformance.serial_init import HOST_ZERO_WORKER, SerialExecutor
from anydev.core import EngineConfig, InferEngine, format_timeline
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.executors.registry import register_executor
from anydev.core.engine_config import default_read_threads, torch_dtype
from anydev.core.exits import exit_process, run_command
from anydev.core.rank.kv_cache import KVLayout
from anydev.core.loading.random_weights import add_shape_arguments, config_from_arguments, random_checkpoint
from anydev.core.models.sharding import check_tp, rank_shard
from anydev.core.timeline import PHASES, phase_seconds
from anydev.core.config import expected_tensor_names
from anydev.core.loading.weights import RankWeights, projection_formats
from anydev.plugin_api import load_backend

#: mode -> its EngineConfig settings: the executor (default threads: every rank at once; "serial": one
#: rank after another, see :func:`run`) and the rank worker (default: the KV cache zeroed by one device
#: memset; HOST_ZERO_WORKER: from host zeros, a synchronize after every layer). Both are the serial
#: init's halves, kept outside the engine in anydev.conformance.serial_init.
MODE_SETTINGS = {
    "serial": dict(executor="serial", worker_cls=HOST_ZERO_WORKER), "serial+memset": dict(executor="serial"),
    "parallel+host-zero": dict(worker_cls=HOST_ZERO_WORKER), "sequential": dict(executor="serial"), "parallel": {},
}
MODES = tuple(MODE_SETTINGS)
#: Parallel init with a process per rank (executor="mp"), beside the thread executor's: ``--modes parallel,parallel-mp``.
MODE_SETTINGS["parallel-mp"] = dict(executor="mp")


#: The settings each mode sets itself (see MODE_SETTINGS), and those the bench sets from its own flags.
CASE_FIELDS = ("executor", "worker_cls", "use_graphs", "pp")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p.add_argument_group("engine"), exclude=CASE_FIELDS, defaults=dict(device="cpu", tp=1, block_size=16, memory_fraction=0.95))
    p.add_argument("--model", help="an HF model directory or a .gguf file (make_random_model.py writes both); "
                                   "default: random weights made in process from the shape options")
    add_shape_arguments(p)
    p.add_argument("--kv-gib-per-rank", type=float, default=None,
                   help="KV cache size per rank, GiB (default 1; --num-blocks gives it in blocks instead)")
    p.add_argument("--staging-mib", type=int, default=128, help="pinned staging memory per rank, MiB")
    p.add_argument("--read-threads", type=int, default=None, help="reader threads per rank (default: cores / tp, <= 8)")
    p.add_argument("--limit-mib", type=int, default=1024, help="buffer size of the bandwidth measurements, MiB")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"engine init modes to run, of {','.join(MODE_SETTINGS)} (parallel-mp: a process per rank)")
    p.add_argument("--repeat", type=int, default=1, help="runs per mode (alternating); the best is reported")
    p.add_argument("--no-warmup", action="store_true", help="let the first run also pay for device context creation")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.num_blocks is not None and args.kv_gib_per_rank is not None:
        p.error("give the KV cache size once: --num-blocks or --kv-gib-per-rank")
    return args


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def run(args) -> int:
    register_executor(SerialExecutor)   # EngineConfig(executor="serial"), through the executors' registry
    if args.model:
        from anydev.core.loading.checkpoint import open_checkpoint

        def fresh():   # a new memory map per measurement: none inherits page tables another filled
            return contextlib.closing(open_checkpoint(args.model))
    else:
        in_process = random_checkpoint(config_from_arguments(args))

        def fresh():
            return contextlib.nullcontext(in_process)
    checkpoint = in_process if not args.model else open_checkpoint(args.model)
    model = checkpoint.config
    check_tp(model, args.tp)
    backend = load_backend(args.device)
    dtype = torch_dtype(args.dtype) if args.dtype else (torch.float32 if backend.torch_device_type == "cpu" else torch.bfloat16)
    block_bytes = KVLayout(model.num_hidden_layers, 1, args.block_size, rank_shard(model, args.tp, 0).num_kv_heads,
                           model.head_dim, dtype).block_bytes
    num_blocks = args.num_blocks or max(1, int((args.kv_gib_per_rank or 1.0) * 2**30) // block_bytes)
    threads = args.read_threads or default_read_threads(args.tp)
    staging = args.staging_mib << 20
    engine = engine_config_from_args(args, dtype=str(dtype).removeprefix("torch."), num_blocks=num_blocks,
                                     weight_staging_bytes=staging, weight_read_threads=threads, use_graphs=False)
    config = {name: value for name, value in vars(engine).items() if name not in ("executor", "worker_cls")}
    print(f"model: {checkpoint!r}\nKV cache per rank: {num_blocks} blocks x {block_bytes} B = "
          f"{num_blocks * block_bytes / 2**30:.2f} GiB; {args.tp} rank(s) on {args.device}; "
          f"{threads} reader thread(s) and {args.staging_mib} MiB pinned staging per rank; {os.cpu_count()} cores")
    devices = [backend.device(i) for i in range(args.tp)]
    if not args.no_warmup:   # create each device's context once, outside the timed runs
        for device in devices:
            device.synchronize()

    report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), host=platform.node(), command=" ".join(sys.argv),
                  config=config, model=_shape(model), source=checkpoint.source)
    report["limits"] = limits = measure_limits(devices, args.limit_mib << 20)
    print(f"\nhost memory bandwidth (copy): {limits['host_copy_gbps_1_thread']:.1f} GB/s on 1 thread, "
          f"{limits['host_copy_gbps_all']:.1f} GB/s on {limits['host_threads']} threads")
    print("pinned host->device: " + ", ".join(f"device {i} {g:.1f} GB/s alone" for i, g in enumerate(limits["h2d_gbps_alone"]))
          + f"; all {args.tp} together {sum(limits['h2d_gbps_together']):.1f} GB/s "
          f"({', '.join(f'{g:.1f}' for g in limits['h2d_gbps_together'])})")
    if args.model:
        report["page_cache"] = warm_page_cache(args.model)
        print(f"page cache warmed: {report['page_cache']['bytes'] / 1e9:.2f} GB of weight files read in "
              f"{report['page_cache']['seconds']:.2f} s ({report['page_cache']['gbps']:.1f} GB/s)")

    report["weights"] = weights = measure_weights(fresh, devices, dtype, staging, threads, args.quantization)
    print_weights(weights, limits)

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for mode in modes:
            with fresh() as checkpoint:
                result = measure(checkpoint, replace(engine, **MODE_SETTINGS[mode]))
            if mode not in best or result["init_seconds"] < best[mode]["init_seconds"]:
                best[mode] = result
    for mode in modes:
        r = best[mode]
        print(f"\n{mode} init: {r['init_seconds']:.3f} s")
        print(r["table"])
        for rank in r["ranks"]:
            load = rank["load"]
            print(f"  rank {rank['rank']}: weights {load['stored_bytes'] / 1e9:.2f} GB in {load['seconds']:.3f} s = "
                  f"{load['gbps']:.1f} GB/s (reading {load['read_seconds']:.3f} s, waiting on copies "
                  f"{load['wait_seconds']:.3f} s, opening slices {load['open_seconds']:.3f} s); KV zero "
                  f"{rank['kv_bytes'] / 2**30:.2f} GiB, host-timed {rank['zero_host_gbps']:.1f} GB/s, "
                  f"device-timed {rank['zero_device_gbps']:.1f} GB/s")
    ratios = {}
    if "parallel" in best and "sequential" in best:
        alone = max(rank["span_seconds"] for rank in best["sequential"]["ranks"])
        ratios["parallel_over_slowest_rank_alone"] = best["parallel"]["init_seconds"] / alone
        print(f"\nparallel init wall / slowest rank alone: {best['parallel']['init_seconds']:.3f} / {alone:.3f} s "
              f"= {ratios['parallel_over_slowest_rank_alone']:.2f}x (target <= 1.15x)")
    if "parallel" in best and "serial" in best:
        ratios["serial_over_parallel"] = best["serial"]["init_seconds"] / best["parallel"]["init_seconds"]
        print(f"serial / parallel init time: {ratios['serial_over_parallel']:.2f}x")
    if "parallel" in best and "parallel-mp" in best:
        ratios["processes_over_threads"] = best["parallel-mp"]["init_seconds"] / best["parallel"]["init_seconds"]
        print(f"parallel init, a process per rank / threads: {best['parallel-mp']['init_seconds']:.3f} / "
              f"{best['parallel']['init_seconds']:.3f} s = {ratios['processes_over_threads']:.2f}x")
    if "serial" in best:
        print(f"\n{'init mode':>20}  {'seconds':>8}  {'serial / this':>13}")
        for mode in best:
            seconds = best[mode]["init_seconds"]
            ratios[f"serial_over_{mode}"] = best["serial"]["init_seconds"] / seconds
            print(f"{mode:>20}  {seconds:>8.3f}  {ratios[f'serial_over_{mode}']:>12.2f}x")
    report.update(ratios=ratios, modes={m: {k: v for k, v in r.items() if k != "table"} for m, r in best.items()})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    return 0


# ---- limits ---------------------------------------------------------------------------------
def measure_limits(devices, nbytes: int) -> dict:
    host_threads = os.cpu_count() or 1
    return dict(host_copy_gbps_1_thread=host_copy_gbps(1, nbytes), host_copy_gbps_all=host_copy_gbps(host_threads, nbytes),
                host_threads=host_threads, h2d_gbps_alone=[h2d_gbps([d], nbytes)[0] for d in devices],
                h2d_gbps_together=h2d_gbps(devices, nbytes))


def host_copy_gbps(threads: int, nbytes: int, repeat: int = 3) -> float:
    """Bytes copied per second by ``threads`` threads, each copying its part of one buffer (best of 3)."""
    src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    bounds = [nbytes * i // threads for i in range(threads + 1)]
    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeat):
            start = time.perf_counter()
            list(pool.map(lambda i: np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]]), range(threads)))
            best = max(best, nbytes / (time.perf_counter() - start) / 1e9)
    return best


def h2d_gbps(devices, nbytes: int, repeat: int = 3) -> list[float]:
    """Pinned host->device copy bandwidth of each device, all of ``devices`` copying at once."""
    barrier = threading.Barrier(len(devices))

    def one(device) -> float:
        device.set_current()
        host, dev, stream = device.alloc_host(nbytes), device.alloc(nbytes), device.create_stream()
        try:
            stream.memcpy_async(dev, host)   # first touch outside the timing
            stream.synchronize()
            barrier.wait()
            start = time.perf_counter()
            for _ in range(repeat):
                stream.memcpy_async(dev, host)
            stream.synchronize()
            return repeat * nbytes / (time.perf_counter() - start) / 1e9
        finally:
            stream.close()
            dev.close()
            host.close()

    with ThreadPoolExecutor(len(devices)) as pool:
        return list(pool.map(one, devices))


def warm_page_cache(directory) -> dict:
    """Read every weight file (or the one GGUF file) once: the loads below then read from the page cache."""
    from pathlib import Path

    total, start = 0, time.perf_counter()
    chunk = bytearray(64 << 20)
    path = Path(directory)
    for path in [path] if path.is_file() else sorted(path.glob("*.safetensors")):
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(chunk):
                total += n
    seconds = time.perf_counter() - start
    return dict(bytes=total, seconds=seconds, gbps=total / seconds / 1e9 if seconds else 0.0)


# ---- weights alone and together ---------------------------------------------------------------
def measure_weights(fresh, devices, dtype, staging: int, threads: int, quantization: str | None = None) -> dict:
    """Each rank's weight load alone (one after another, each from a freshly opened checkpoint), then
    all at once (from one, shared, as the engine does), in the weight formats the engine loads
    (``quantization``: as EngineConfig's; GGUF blocks kept by default)."""
    tp = len(devices)

    def load(rank: int, barrier=None, shared=None) -> dict:
        with fresh() if shared is None else contextlib.nullcontext(shared) as checkpoint:
            return load_from(checkpoint, rank, barrier)

    def load_from(checkpoint, rank: int, barrier) -> dict:
        config = checkpoint.config
        device = devices[rank]
        device.set_current()
        stream = device.create_stream()
        shard = rank_shard(config, tp, rank)
        formats = projection_formats(checkpoint, expected_tensor_names(config), shard, quantization)
        weights = RankWeights(device, config, shard, dtype, formats=formats)
        try:
            if barrier is not None:
                barrier.wait()
            stats = weights.load(checkpoint, stream, lambda: None, lambda n: None, staging, threads)
            return dict(rank=rank, **vars(stats), gbps=stats.gbps)
        finally:
            weights.close()
            stream.close()

    alone = [load(rank) for rank in range(tp)]
    barrier = threading.Barrier(tp)
    with fresh() as shared, ThreadPoolExecutor(tp) as pool:
        start = time.perf_counter()
        together = list(pool.map(lambda r: load(r, barrier, shared), range(tp)))
        wall = time.perf_counter() - start   # includes each rank's device allocation before the barrier
    slowest = max(r["seconds"] for r in together)
    stored = sum(r["stored_bytes"] for r in together)
    return dict(alone=alone, together=together, together_slowest_seconds=slowest, together_wall_seconds=wall,
                together_total_gbps=stored / slowest / 1e9 if slowest else 0.0)


def print_weights(weights: dict, limits: dict) -> None:
    print("\nweight load (stored bytes / seconds until the last copy is done; page cache warm)")
    print(f"{'rank':>4}  {'GB':>6}  {'alone s':>8}  {'GB/s':>6}  {'together s':>10}  {'GB/s':>6}  "
          f"{'read s':>7}  {'wait s':>7}  {'open s':>7}   (together: read, waiting on copies, opening slices)")
    for a, t in zip(weights["alone"], weights["together"]):
        print(f"{a['rank']:>4}  {a['stored_bytes'] / 1e9:>6.2f}  {a['seconds']:>8.3f}  {a['gbps']:>6.1f}  "
              f"{t['seconds']:>10.3f}  {t['gbps']:>6.1f}  {t['read_seconds']:>7.3f}  {t['wait_seconds']:>7.3f}  "
              f"{t['open_seconds']:>7.3f}")
    print("rank 0 alone, reading the checkpoint by kind of tensor (host time; conversions on the device are not in it):")
    for kind, (seconds, nbytes) in sorted(weights["alone"][0]["reads"].items(), key=lambda kind: -kind[1][0]):
        print(f"  {kind:>24}  {seconds:7.3f} s  {nbytes / 1e9:6.3f} GB  {nbytes / seconds / 1e9 if seconds else 0:6.1f} GB/s")
    slowest_alone = max(a["seconds"] for a in weights["alone"])
    print(f"together: {weights['together_total_gbps']:.1f} GB/s in total; slowest rank together / slowest alone "
          f"{weights['together_slowest_seconds'] / slowest_alone:.2f}x; limits: pinned host->device "
          f"{min(limits['h2d_gbps_alone']):.1f} GB/s per device alone, {sum(limits['h2d_gbps_together']):.1f} together; "
          f"host copy {limits['host_copy_gbps_all']:.1f} GB/s")


# ---- engine init ------------------------------------------------------------------------------
def measure(checkpoint, config: EngineConfig) -> dict:
    with InferEngine(checkpoint, config) as engine:
        records = engine.timeline
        t0 = min(r.start for r in records)
        ranks = []
        for rank, (nbytes, device_ms) in enumerate(zip(engine.kv_cache_bytes, engine.kv_zero_device_ms)):
            mine = [r for r in records if r.rank == rank]
            host_s = phase_seconds(records, rank, "kv zero") + phase_seconds(records, rank, "sync")
            stats = engine.workers[rank].weights.stats
            ranks.append(dict(rank=rank, kv_bytes=nbytes, zero_host_gbps=nbytes / host_s / 1e9 if host_s else 0.0,
                              zero_device_gbps=nbytes / (device_ms / 1e3) / 1e9 if device_ms else 0.0,
                              span_seconds=max(r.end for r in mine) - min(r.start for r in mine),
                              load=dict(**vars(stats), gbps=stats.gbps),
                              phases_ms={p: phase_seconds(records, rank, p) * 1e3 for p in PHASES}))
        return dict(init_seconds=engine.init_seconds, table=format_timeline(records, t0), ranks=ranks,
                    records=[dict(rank=r.rank, phase=r.phase, start=r.start - t0, end=r.end - t0) for r in records])


def _shape(model) -> dict:
    return {k: getattr(model, k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                           "num_key_value_heads", "intermediate_size", "vocab_size")}


if __name__ == "__main__":
    exit_process(main())
