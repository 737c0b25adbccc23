"""The engine core's host time per step while it serves N streams, against the same steps offline.

    python benchmarks/core_step_cost.py --model /tmp/tiny --streams 64 --output-len 256
    python benchmarks/core_step_cost.py --model /tmp/tiny --profile core.prof      # cProfile the core
    python benchmarks/core_step_cost.py --model /tmp/tiny --switch-interval 0.0005  # the GIL handed over sooner

Two runs of the same engine (``--device``, default cpu) and requests of the same shape (random prompts
of ``--prompt-len`` tokens, each run its own, ``--output-len`` tokens each, EOS ignored, greedy, all at
once):

* ``offline``: ``InferEngine.generate_ids``, this process;
* ``served``: an :class:`~anydev.serving.engine_core.EngineCore` on this process's main thread and one
  front end (an :class:`~anydev.serving.async_engine.AsyncEngine` that detokenizes each request's
  text as the server does, without HTTP) in a spawned process.

For each: the median wall time between steps while all N streams decode, and the main thread's CPU
time per such step (``time.thread_time``: the host work of the thread that steps; the ranks' threads,
which run the forward, are not counted). served - offline is what the core's loop adds per step. Then
where the wall time of such a step goes, by wall clocks around ``engine.step`` and the served loop's
own methods (receive, collect, expire, flush; no profiler's overhead), the rest being the loop's other
work (offline: generate_ids'). The prompts' steps (those that bring back a step with prompt tokens) get
the same breakdown, beside the engine's own count of them and their seconds (its ``prefill_*`` counters):
a served run whose prompts take longer than offline shows here which part of the loop adds it; so do
the garbage collector's pauses in each run. The front end's CPU time per token is printed too.
``--profile FILE`` runs the core's loop under cProfile.
Every run is bounded: N requests, ``--deadline`` seconds.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import multiprocessing
import os
import random
import statistics
import sys
import time

import torch

from anydev.core import InferEngine, SamplingParams
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.loading.checkpoint import open_checkpoint


def _front_end(address: str, info, lifeline, prompts, output_len: int, deadline: float, done) -> None:
    """One front end: every request at once, each one's text made as it streams; sends its CPU per token."""
    from anydev.core.output import OutputText
    from anydev.serving.async_engine import AsyncEngine
    from anydev.serving.engine_core import CoreLink

    async def main():
        engine = AsyncEngine(CoreLink(address, info, lifeline))
        await engine.connect()
        tokenizer = info.tokenizer.build()
        sampling = SamplingParams(max_new_tokens=output_len, ignore_eos=True)
        cpu = time.process_time()

        async def one(prompt):
            stream = await engine.add_request(prompt, sampling, text=OutputText(tokenizer, []))
            async for _ in stream.updates():
                stream.text.take()
            return len(stream.output)

        tokens = await asyncio.wait_for(asyncio.gather(*(one(p) for p in prompts)), deadline)
        cpu = time.process_time() - cpu
        await engine.close()
        done.send((sum(tokens), cpu))

    asyncio.run(main())


class StepClock:
    """Wraps ``engine.step``: each step's start (wall) and the main thread's CPU time then, and how many
    were running; with :meth:`time`, the wall time spent in other methods between two steps, by name."""

    def __init__(self, engine: InferEngine):
        self.engine, self._step = engine, engine.step
        self.marks: list[tuple[float, float, int]] = []
        self.phases: list[dict[str, float]] = []      # per step: seconds in each timed method, engine.step's too
        self.prefill: list[bool] = []                   # per step: it brought back a step with prompt tokens
        self.first = self.last = engine.stats()         # the engine's counters before and after the run
        self._prefill_steps = self.first.prefill_steps  # the engine's count after the last step
        self.gc = ""                                    # the collector's pauses in the run (GcClock.stop)
        engine.step = self

    def __call__(self):
        self.marks.append((time.perf_counter(), time.thread_time(), len(self.engine.scheduler.running)))
        self.phases.append({})
        got = self.time("engine.step", self._step)()
        # the engine's own count, read without stats(): its lock and copy would land in the timed loop
        count = self.engine._stats.prefill_steps
        self.prefill.append(count > self._prefill_steps)
        self._prefill_steps = count
        return got

    def finish(self, collector: "GcClock") -> None:
        """The run is over: the engine's step goes back, its counters and ``collector``'s pauses are kept."""
        self.engine.step = self._step
        self.last = self.engine.stats()
        self.gc = collector.stop()

    def prefill_counters(self) -> tuple[int, float]:
        """The engine's prompt steps in the run, and their seconds (its own clock)."""
        return (self.last.prefill_steps - self.first.prefill_steps,
                self.last.prefill_seconds - self.first.prefill_seconds)

    def time(self, name: str, method):
        """``method`` wrapped so that its wall time adds to the current step's ``name``."""
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                if self.phases:
                    phases = self.phases[-1]
                    phases[name] = phases.get(name, 0.0) + time.perf_counter() - start
        return timed

    def phase_means(self, streams: int | None) -> dict[str, float]:
        """Mean µs a step in each timed method over the steps :meth:`per_step` counts (``streams`` None:
        over the prompts' steps), and the rest of the time between steps (``other``)."""
        steps = [(b[0] - a[0], phases) for a, b, phases, prefill in zip(self.marks, self.marks[1:], self.phases,
                                                                        self.prefill)
                 if (prefill if streams is None else a[2] == b[2] == streams)]
        if not steps:
            return {}
        names = sorted({name for _, phases in steps for name in phases})
        means = {name: statistics.fmean(phases.get(name, 0.0) for _, phases in steps) * 1e6 for name in names}
        means["other"] = statistics.fmean(wall for wall, _ in steps) * 1e6 - sum(means.values())
        return means

    def per_step(self, streams: int) -> tuple[float, float, int]:
        """Median wall and mean main-thread CPU (µs) between consecutive steps that both ran every stream."""
        pairs = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(self.marks, self.marks[1:]) if a[2] == b[2] == streams]
        if not pairs:
            return float("nan"), float("nan"), 0
        return (statistics.median(p[0] for p in pairs) * 1e6, statistics.fmean(p[1] for p in pairs) * 1e6, len(pairs))


class GcClock:
    """The garbage collector's pauses on this process while it is on (``gc.callbacks``): count and
    seconds per generation."""

    def __init__(self):
        self.count, self.seconds, self._start = [0, 0, 0], [0.0, 0.0, 0.0], 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.count[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._start

    def stop(self) -> str:
        gc.callbacks.remove(self._callback)
        return ", ".join(f"gen{g} {n} ({1e3 * t:.1f} ms)" for g, (n, t) in enumerate(zip(self.count, self.seconds)))


def offline(engine: InferEngine, prompts, sampling) -> StepClock:
    clock, collector = StepClock(engine), GcClock()
    try:
        engine.generate_ids(prompts, sampling)
    finally:
        clock.finish(collector)
    return clock


def served(engine: InferEngine, prompts, args):
    from anydev.serving.engine_core import EngineCore, client_identity, engine_info, new_address, remove_address

    context = multiprocessing.get_context("spawn")
    lifeline_read, lifeline_write = context.Pipe(duplex=False)
    done_read, done_write = context.Pipe(duplex=False)
    address = new_address()
    client = context.Process(target=_front_end, args=(address, engine_info(engine), lifeline_read, prompts,
                                                      args.output_len, args.deadline, done_write))
    client.start()
    lifeline_read.close()
    clock, collector = StepClock(engine), GcClock()
    core = EngineCore(engine, address, {client_identity(0)})
    for name in ("_receive", "_collect", "_expire", "_flush"):     # the loop's own work between steps
        setattr(core, name, clock.time(name, getattr(core, name)))
    profile = cProfile.Profile() if args.profile else None
    try:
        if profile:
            profile.enable()
        core.run()
    finally:
        if profile:
            profile.disable()
            profile.dump_stats(args.profile)
        clock.finish(collector)
        lifeline_write.close()
        client.join(10)
        remove_address(address)
    tokens, cpu = done_read.recv() if done_read.poll(1) else (0, float("nan"))
    return clock, tokens, cpu


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p.add_argument_group("engine"), defaults=dict(device="cpu", tp=1))
    p.add_argument("--model", required=True)
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--deadline", type=float, default=300.0, help="seconds at most per run")
    p.add_argument("--profile", help="write the served core's cProfile stats here")
    p.add_argument("--skip-offline", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the forward (default 1: the front end has a core)")
    p.add_argument("--switch-interval", type=float, default=None,
                   help="sys.setswitchinterval for both runs (seconds; Python's default 0.005): how long a thread that "
                        "wants the GIL waits before the thread holding it must let go (the core's loop and the rank "
                        "threads share it)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if args.max_num_seqs is None:
        args.max_num_seqs = args.streams
    rng = random.Random(0)
    checkpoint = open_checkpoint(args.model)
    vocab = checkpoint.config.vocab_size
    # each run its own prompts: the served run would otherwise find the offline run's in the prefix cache
    warm_prompts, prompts, served_prompts = ([[rng.randrange(vocab) for _ in range(args.prompt_len)]
                                              for _ in range(args.streams)] for _ in range(3))
    sampling = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
    with InferEngine(checkpoint, engine_config_from_args(args)) as engine:
        # warm-up: every step shape both runs meet (prompt chunks beside decodes) compiled and captured
        engine.generate_ids(warm_prompts, SamplingParams(max_new_tokens=8, ignore_eos=True))
        clocks = {}
        if not args.skip_offline:
            clocks["offline"] = offline(engine, prompts, sampling)
        clocks["served"], tokens, fe_cpu = served(engine, served_prompts, args)
    rows = [(name, *clock.per_step(args.streams)) for name, clock in clocks.items()]
    print(f"{args.streams} streams, {args.output_len} tokens each, device {args.device}, "
          f"switch interval {sys.getswitchinterval() * 1e3:g} ms")
    print(f"{'run':<8} {'step wall µs':>12} {'core CPU µs/step':>16} {'steps':>6}")
    for name, wall, cpu, count in rows:
        print(f"{name:<8} {wall:>12.0f} {cpu:>16.0f} {count:>6}")
    if len(rows) == 2:
        print(f"served - offline: {rows[1][1] - rows[0][1]:+.0f} µs wall, {rows[1][2] - rows[0][2]:+.0f} µs core CPU per step")
    print(f"front end: {tokens} tokens, {fe_cpu / max(tokens, 1) * 1e6:.1f} µs CPU per token")
    print("where a step's wall time goes (mean µs a step; other: the rest of the loop between steps):")
    for name, clock in clocks.items():
        print(f"{name:<8} " + ", ".join(f"{phase} {us:.0f}" for phase, us in clock.phase_means(args.streams).items()))
    print("the prompts' steps (the engine's prefill counters; mean µs a step as above):")
    counted = {name: clock.prefill_counters() for name, clock in clocks.items()}
    for name, clock in clocks.items():
        steps, seconds = counted[name]
        means = clock.phase_means(None)
        print(f"{name:<8} prefill {steps} steps {seconds:.3f} s: " + ", ".join(f"{p} {us:.0f}" for p, us in means.items()))
    print("the garbage collector's pauses (this process, each run):")
    for name, clock in clocks.items():
        print(f"{name:<8} gc: {clock.gc}")
    if len(counted) == 2 and counted["offline"][1] > 0:
        print(f"prefill seconds, served / offline: {counted['served'][1] / counted['offline'][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
