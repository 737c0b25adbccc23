"""The engine's own host work per decode step, without a model: plan, pack and account for N streams.

    python benchmarks/sched_step_cost.py --streams 64,256 --steps 200

What the engine's step loop does on the host around each forward, with no forward and no executor:
``Scheduler.schedule`` (the plan), ``padded_step`` (the packed step batch, padded to its decode-graph
bucket as the GPU engine does), the rows' sampling parameters and their logprobs layout, the step
before's tokens taken (made-up ones; each row fed that step's token as still pending, as the engine's
overlapped steps do), then ``Scheduler.advance``. N
sequences of ``--prompt-len`` prompt tokens are admitted and prefilled first; the timed steps are
decode steps of all N. Every figure is the median over ``--repeats`` runs of ``--steps`` steps, µs a
step; the garbage collector runs as usual. It is the host time that the 1B shape's decode at 256
streams waits for on a GPU (``core_step_cost.py`` measures it inside the engine, forward included).
"""
from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

from anydev.core.sched.block_manager import BlockManager
from anydev.core.sched.logprobs import step_layout
from anydev.core.sched.scheduler import Scheduler, Sequence
from anydev.core.step_loop import _row_params
from anydev.core.step_padding import padded_step

PHASES = ("schedule", "pack", "params", "take", "advance")


def run(streams: int, steps: int, prompt_len: int, block_size: int, seed: int) -> dict[str, list[float]]:
    """µs of each phase, for each of ``steps`` decode steps of ``streams`` sequences."""
    rng = random.Random(seed)
    need = -(-(prompt_len + steps + 8) // block_size)
    scheduler = Scheduler(BlockManager(streams * need + 8, block_size), streams, max(8192, streams * prompt_len))
    for index in range(streams):
        scheduler.add(Sequence(index, [rng.randrange(3, 32000) for _ in range(prompt_len)], steps + 8))
    max_blocks = need
    times = {phase: [] for phase in PHASES}
    pending: list[Sequence] = []
    for step in range(steps + 1):
        marks = [time.perf_counter()]
        plan = scheduler.schedule()
        marks.append(time.perf_counter())
        padded_step(plan.seqs, plan.num_new, block_size=block_size, max_num_seqs=streams,
                    max_blocks_per_seq=max_blocks, uses_graphs=True, token_buckets=[8192])
        marks.append(time.perf_counter())
        params = _row_params(plan)
        step_layout(params, [0, *itertools.accumulate(plan.num_new)])
        marks.append(time.perf_counter())
        for seq in pending:         # the step before's tokens, read back while this one runs
            seq.num_pending = 0
            seq.output.append(rng.randrange(3, 32000))
        marks.append(time.perf_counter())
        pending = scheduler.advance(plan)
        marks.append(time.perf_counter())
        if step > 0:            # the first step prefills every prompt
            for phase, a, b in zip(PHASES, marks, marks[1:]):
                times[phase].append((b - a) * 1e6)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=lambda s: [int(n) for n in s.split(",")], default=[64, 256])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--block-size", type=int, default=16)
    args = p.parse_args(argv)
    print(f"{'streams':>7}  " + "  ".join(f"{phase:>9}" for phase in PHASES) + "      total  (µs a decode step, median)")
    for streams in args.streams:
        runs = [run(streams, args.steps, args.prompt_len, args.block_size, seed) for seed in range(args.repeats)]
        medians = {phase: statistics.median(t for r in runs for t in r[phase]) for phase in PHASES}
        totals = statistics.median(sum(r[phase][i] for phase in PHASES) for r in runs for i in range(args.steps))
        print(f"{streams:>7}  " + "  ".join(f"{medians[phase]:>9.1f}" for phase in PHASES) + f"  {totals:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
