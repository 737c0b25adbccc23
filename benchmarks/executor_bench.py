"""Each executor's own host work per decode step, side by side: same model, prompts and steps.

    python benchmarks/executor_bench.py --device nvidia --tp 1 --executors threads,mp --batch-sizes 1,32
    python benchmarks/executor_bench.py --tiny --executors threads,mp --new-tokens 64      # cpu smoke

Engines are built one after another, the executors' order alternating over ``--repeats`` (drift and
what an earlier engine left behind hit each alike). Each decodes ``--new-tokens`` greedily at each
batch size (prompts of ``--context`` tokens), after an untimed run of the same shape. Per executor,
the median over the repeats of:

* ``step ms``: the engine's decode step (its step statistics, as ``decode_bench.py``);
* ``dispatch us``: the executor's own host time per step: the engine launching a step on its ranks
  and waiting for it (``InferEngine._run_step``: ``executor.run``, ``wait_step``, the result) minus
  rank 0's ``RankWorker.forward`` on its thread: the hand-off to the rank thread and back, the futures,
  the step message to the other ranks;
* ``gc/1k``: garbage collections per 1000 decode steps, and ``gc us``: their pauses per step;
* ``kept``: objects the collector tracks that outlived the run, per step (a per-step leak shows here;
  the collections and their pauses grow with it).

Then each executor over the first one (``--executors``' first), on step ms and dispatch us.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import statistics
import time

import torch

from anydev.core import EngineConfigError, InferEngine, SamplingParams
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.loading.random_weights import LLAMA_1B, LLAMA_TINY, llama_config, random_checkpoint
from anydev.core.rank.rank_worker import RankWorker
from anydev.core.exits import exit_process, run_command

EXECUTORS = ("threads", "mp")
CASE_FIELDS = ("executor", "max_model_len", "max_num_seqs", "enable_prefix_caching")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p.add_argument_group("engine"), exclude=CASE_FIELDS, defaults=dict(device="cpu", tp=1, kernels="native"))
    p.add_argument("--executors", default="threads,mp", help="comma list of threads, mp (the first is the base)")
    p.add_argument("--batch-sizes", default="1")
    p.add_argument("--context", type=int, default=256, help="prompt length")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=4, help="engines per executor, the order alternating")
    p.add_argument("--layers", type=int, default=None, help="default: 16 (2 with --tiny)")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, vocab 256: host work only")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def run(args) -> int:
    executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    if not executors or set(executors) - set(EXECUTORS):
        raise EngineConfigError(f"--executors takes {', '.join(EXECUTORS)}; got {args.executors!r}")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    longest = args.context + args.new_tokens + 16
    shape = LLAMA_TINY if args.tiny else LLAMA_1B
    model = llama_config(max_position_embeddings=longest, **dict(shape, num_hidden_layers=args.layers
                                                                 or shape["num_hidden_layers"]))
    checkpoint = random_checkpoint(model)
    prompts = torch.randint(2, model.vocab_size, (max(batch_sizes), args.context),
                            generator=torch.Generator().manual_seed(0)).tolist()
    samples: dict[tuple[str, int], list[dict]] = {}
    with timed_steps() as timing:
        for repeat in range(args.repeats):
            for executor in executors if repeat % 2 == 0 else executors[::-1]:
                config = engine_config_from_args(args, executor=executor, max_model_len=longest,
                                                 max_num_seqs=max(batch_sizes), enable_prefix_caching=False)
                with InferEngine(checkpoint, config) as engine:
                    for batch in batch_sizes:
                        samples.setdefault((executor, batch), []).append(
                            measure(engine, prompts[:batch], args.new_tokens, timing))
    print(f"model: {checkpoint!r}, {args.device} x {args.tp}, {args.repeats} engines per executor, "
          f"{args.new_tokens} new tokens, context {args.context}")
    print(f"{'executor':>9}  {'batch':>5}  {'step ms':>8}  {'dispatch us':>11}  {'gc/1k':>6}  {'gc us':>6}  {'kept':>6}")
    medians = {key: {k: statistics.median(s[k] for s in runs) for k in runs[0]} for key, runs in samples.items()}
    for (executor, batch), m in medians.items():
        print(f"{executor:>9}  {batch:>5}  {m['step_ms']:>8.3f}  {m['dispatch_us']:>11.1f}  {m['gc_per_1k']:>6.1f}  "
              f"{m['gc_us']:>6.1f}  {m['kept']:>6.2f}")
    base = executors[0]
    for executor in executors[1:]:
        for batch in batch_sizes:
            m, b = medians[(executor, batch)], medians[(base, batch)]
            print(f"{executor} / {base}, batch {batch}: step {m['step_ms'] / b['step_ms']:.3f}x, "
                  f"dispatch {m['dispatch_us'] / b['dispatch_us']:.2f}x ({m['dispatch_us'] - b['dispatch_us']:+.1f} us)")
    return 0


def measure(engine: InferEngine, prompts, new_tokens: int, timing: "StepTiming") -> dict:
    """One timed generate after an untimed one of the same shape."""
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    engine.generate_ids(prompts, sampling)
    gc.collect()
    timing.reset()
    tracked = len(gc.get_objects())
    engine.generate_ids(prompts, sampling)
    kept = len(gc.get_objects()) - tracked
    steps = len(timing.launch)
    return dict(step_ms=engine.last_stats.decode_step_ms,
                dispatch_us=1e6 * statistics.median(o - i for o, i in zip(timing.launch, timing.forward)),
                gc_per_1k=1000 * timing.collections / steps, gc_us=1e6 * timing.gc_seconds / steps, kept=kept / steps)


class StepTiming:
    """Seconds of each step's launch (engine side) and of rank 0's forward, and the collector's work."""

    def __init__(self):
        self.reset()
        self._gc_start = 0.0

    def reset(self) -> None:
        self.launch, self.forward = [], []
        self.collections, self.gc_seconds = 0, 0.0

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.collections += 1
            self.gc_seconds += time.perf_counter() - self._gc_start


@contextlib.contextmanager
def timed_steps():
    """Time ``InferEngine._run_step`` and rank 0's ``RankWorker.forward`` (the other ranks' run in
    their own processes, untimed) and count garbage collections, while in force."""
    timing = StepTiming()
    run_step, forward = InferEngine._run_step, RankWorker.forward

    @functools.wraps(run_step)
    def timed_run_step(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return run_step(self, *args, **kwargs)
        finally:
            timing.launch.append(time.perf_counter() - start)

    @functools.wraps(forward)   # the executors dispatch by the method's name
    def timed_forward(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return forward(self, *args, **kwargs)
        finally:
            if self.rank == 0:
                timing.forward.append(time.perf_counter() - start)

    InferEngine._run_step, RankWorker.forward = timed_run_step, timed_forward
    gc.callbacks.append(timing.on_gc)
    try:
        yield timing
    finally:
        InferEngine._run_step, RankWorker.forward = run_step, forward
        gc.callbacks.remove(timing.on_gc)


if __name__ == "__main__":
    exit_process(main())
