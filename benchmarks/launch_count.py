"""Device kernel launches per decode step, by name: a deterministic count (no timing) of what a CUDA-graph
replay of the step runs, since at batch 1 a step's time outside the GEMMs is mostly its count of small
kernels (a few us each on the device, however little they do). On the cpu backend with the Triton
kernels under the interpreter:

    TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1 python benchmarks/launch_count.py --arch llama,qwen3 --batch-sizes 1,4
    TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1 python benchmarks/launch_count.py --gguf Q4_K   # the int8-activation GEMVs
    ... --kernels unfused        # the backend's kernels with every fused one run as its parts

Counted in the rank's step (its inputs' copy, the forward, the sampling): every Triton launch by kernel
(``_linear_kernel`` with its weight format, ``int-dot`` where its steps are integer dots on int8
activations, ``split-K`` where its K is sliced), and every torch op that launches a device kernel on a GPU
(``aten.*``: every op but views, allocations and metadata; on a GPU a copy between host and device is a
copy-engine transfer rather than a kernel, which the cpu backend cannot tell apart). Per layer is the
difference between the same model with one layer more and without it (every layer is alike); the rest
is once a step. Each count must be the same in every counted step, or the run fails.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import tempfile
import threading
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.exits import exit_process, run_command
from anydev.core.loading.random_weights import LLAMA_TINY, TINY_EXTRA, model_config, random_checkpoint

#: aten ops that launch nothing: allocations, metadata, and the host read of a scalar (counted apart).
_NO_KERNEL = {"empty", "empty_strided", "empty_like", "detach", "lift_fresh", "set_", "resize_", "alias",
              "_unsafe_view", "_local_scalar_dense", "is_nonzero", "promote_types", "sym_size", "sym_stride",
              "sym_numel", "sym_storage_offset"}
#: A shape every format's integer-dot GEMV takes (K a multiple of 256), small for the interpreter.
GGUF_SHAPE = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                  num_key_value_heads=2)


class LaunchCounter:
    """Counts launches (a :class:`collections.Counter` per counted rank step) while :meth:`installed`."""

    def __init__(self):
        self.steps: list[collections.Counter] = []
        self.armed = False
        self._local = threading.local()

    def record(self, name: str) -> None:
        current = getattr(self._local, "step", None)
        if current is not None and not getattr(self._local, "in_kernel", False):
            current[name] += 1

    @contextlib.contextmanager
    def installed(self):
        """Patch Triton's launches and the rank worker's step (restored on exit)."""
        from anydev.core.rank.rank_worker import RankWorker

        counter, patches = self, []

        def patch(owner, name, make):
            original = getattr(owner, name)
            patches.append((owner, name, original))
            setattr(owner, name, make(original))

        def launch(original):
            def run(fn_self, *args, grid, warmup=False, **kwargs):
                if not warmup:
                    counter.record(_kernel_label(fn_self.__name__, kwargs))
                counter._local.in_kernel = True          # the interpreter's own torch calls are not launches
                try:
                    return original(fn_self, *args, grid=grid, warmup=warmup, **kwargs)
                finally:
                    counter._local.in_kernel = False
            return run

        def step(original):
            def forward(worker, *args, **kwargs):
                if not counter.armed:
                    return original(worker, *args, **kwargs)
                counter._local.step = collections.Counter()
                try:
                    with _AtenCounter(counter):
                        return original(worker, *args, **kwargs)
                finally:
                    counter.steps.append(counter._local.step)
                    counter._local.step = None
            return forward

        for module, cls in (("triton.runtime.interpreter", "InterpretedFunction"), ("triton.runtime.jit", "JITFunction")):
            owner = getattr(__import__(module, fromlist=[cls]), cls)
            patch(owner, "run", launch)
        patch(RankWorker, "forward", step)
        try:
            yield self
        finally:
            for owner, name, original in reversed(patches):
                setattr(owner, name, original)


class _AtenCounter(TorchDispatchMode):
    def __init__(self, counter: LaunchCounter):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        if name == "_local_scalar_dense":
            self.counter.record("host read (item)")
        elif func.is_view:     # reshape and the like copy where no view has the shape
            if _copied(args[0], out):
                self.counter.record(f"aten.{name} (a copy)")
        elif name not in _NO_KERNEL:
            self.counter.record(f"aten.{name}")
        return out


def _copied(source, out) -> bool:
    """True when a view op's output does not share ``source``'s memory (it made a copy)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return isinstance(source, torch.Tensor) and any(
        isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() != source.untyped_storage().data_ptr()
        for o in outs)


def _kernel_label(name: str, kwargs: dict) -> str:
    if name != "_linear_kernel":
        return name
    from anydev.backends.triton_kernels._weight_tiles import CODES

    weight_format = {code: fmt for fmt, code in CODES.items()}.get(kwargs.get("FORMAT"), kwargs.get("FORMAT"))
    notes = [str(weight_format)] + (["int-dot"] if kwargs.get("INT_DOT") else []) + \
        (["split-K"] if kwargs.get("SLICES", 1) > 1 else [])
    return f"{name} [{', '.join(notes)}]"


def count_step(checkpoint, config: EngineConfig, batch: int, prompt_len: int, steps: int) -> collections.Counter:
    """The launches of one decode step of ``batch`` rows (each of ``steps`` counted steps the same)."""
    counter = LaunchCounter()
    prompts = [[3 + (7 * row + i) % 200 for i in range(prompt_len)] for row in range(batch)]
    with counter.installed(), InferEngine(checkpoint, config) as engine:
        seqs = [engine.add_request(p, SamplingParams(max_new_tokens=steps + 4, ignore_eos=True)) for p in prompts]
        while any(seq.num_cached < len(seq.prompt) for seq in seqs):
            engine.step()
        engine.step()                                              # one decode step uncounted
        counter.armed = True
        for _ in range(steps):
            engine.step()
        counter.armed = False
        while engine.has_unfinished:
            engine.step()
    decode_steps = counter.steps[:steps]
    if len(decode_steps) < steps or any(s != decode_steps[0] for s in decode_steps):
        raise RuntimeError(f"the counted steps differ: {[dict(s) for s in counter.steps]}")
    return decode_steps[0]


def _checkpoint(arch: str, layers: int, gguf: str | None, tmp: Path):
    if gguf is None:
        return random_checkpoint(model_config(arch, max_position_embeddings=256,
                                              **dict(LLAMA_TINY, **TINY_EXTRA.get(arch, {}), num_hidden_layers=layers)))
    from anydev.core.loading.checkpoint import open_checkpoint
    from anydev.core.loading.random_weights import save_random_gguf

    if arch != "llama":
        raise SystemExit(f"--gguf writes llama files only, not {arch}")
    path = tmp / f"{arch}-{layers}-{gguf}.gguf"
    save_random_gguf(path, model_config(arch, max_position_embeddings=256, **GGUF_SHAPE, num_hidden_layers=layers),
                     gguf)
    return open_checkpoint(path)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="llama,qwen3", help="families, comma-separated (llama, qwen3)")
    p.add_argument("--batch-sizes", default="1")
    p.add_argument("--gguf", help="a random llama GGUF file of this type (Q4_K, Q8_0, ...) instead of float weights")
    p.add_argument("--dtype", default=None, help="activations (default: bfloat16 with --gguf, where the "
                                                 "integer-dot GEMVs run; else float32)")
    p.add_argument("--kernels", default="native", help="EngineConfig.kernels (native, unfused, reference)")
    p.add_argument("--layers", type=int, default=2, help="the smaller model's layers (the other has one more)")
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--steps", type=int, default=2, help="decode steps counted (each must count the same)")
    p.add_argument("--out", type=Path, help="also write the counts as JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def run(args) -> int:
    dtype = args.dtype or ("bfloat16" if args.gguf else "float32")
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.arch.split(","):
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                config = EngineConfig(device="cpu", dtype=dtype, kernels=args.kernels, use_graphs=False, block_size=16,
                                      max_num_seqs=batch, max_model_len=128, enable_prefix_caching=False)
                small, large = (count_step(_checkpoint(arch, n, args.gguf, Path(tmp)), config, batch, args.prompt_len,
                                           args.steps) for n in (args.layers, args.layers + 1))
                per_layer = large - small
                fixed = small.copy()
                for name, n in per_layer.items():
                    fixed[name] -= args.layers * n
                report.append(dict(arch=arch, batch=batch, gguf=args.gguf, dtype=dtype, kernels=args.kernels,
                                   per_layer=dict(per_layer), once_a_step=dict(+fixed)))
                print(_table(report[-1]))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


def _table(row: dict) -> str:
    launches = {name: n for name, n in row["per_layer"].items() if name != "host read (item)"}
    title = (f"== {row['arch']}{' ' + row['gguf'] if row['gguf'] else ''} {row['dtype']}, batch {row['batch']}, "
             f"kernels {row['kernels']}: {sum(launches.values())} launches a layer, "
             f"{sum(n for k, n in row['once_a_step'].items() if k != 'host read (item)')} once a step")
    lines = [title, "| launches a layer | kernel |", "|---|---|"]
    lines += [f"| {n} | {name} |" for name, n in sorted(row["per_layer"].items(), key=lambda kv: (-kv[1], kv[0]))]
    lines += [f"| (step) {n} | {name} |" for name, n in sorted(row["once_a_step"].items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)


if __name__ == "__main__":
    exit_process(main())
