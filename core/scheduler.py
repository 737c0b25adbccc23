"""The continuous scheduler (vLLM v1 / nano-vllm shape): requests join and leave the running batch
at any step, and each step is planned within a token budget.

A step first serves the running sequences in arrival order (one token each at decode, the next chunk
of a prompt still in prefill), then admits waiting ones while the budget, ``max_num_seqs`` and the KV
blocks allow; a long prompt is split over steps (chunked prefill), so it never stalls running decodes.
Blocks are allocated as sequences grow; when a running sequence cannot grow, the newest running
sequences are preempted (their blocks given back, their tokens recomputed later: cheaply, since their
full blocks usually stay in the prefix cache). Without chunked prefill a step either prefills whole
prompts or decodes (the classic schedule, kept for the ablation).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .block_manager import BlockManager
from .errors import SchedulerError
from .models.batch import StepBatch
from .sequence import Sequence, Status

__all__ = ["ScheduledStep", "Scheduler", "Sequence", "Status", "build_step"]


@dataclass
class ScheduledStep:
    """One step's plan: ``seqs[i]`` feeds ``num_new[i]`` tokens; ``preempted`` went back to waiting."""

    seqs: list[Sequence]
    num_new: list[int]
    preempted: list[Sequence]

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new)

    @property
    def is_decode(self) -> bool:
        """Every row feeds one token and completes its context (no prefill in the step)."""
        return all(n == 1 and s.num_cached + 1 == s.num_tokens for s, n in zip(self.seqs, self.num_new))


class Scheduler:
    """Waiting and running sequences over one :class:`BlockManager`. Not thread-safe: the engine
    calls it under its lock."""

    def __init__(self, blocks: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_chunked_prefill: bool = True):
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = enable_chunked_prefill
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """End ``seq`` (finished, aborted or failed): out of every queue, its blocks back at once."""
        if seq.status is Status.FINISHED:
            return
        if seq.status is Status.RUNNING:
            self.running.remove(seq)
            self.blocks.free(seq)
        else:
            self.waiting.remove(seq)
        seq.status, seq.finish_reason = Status.FINISHED, reason

    # ---- planning ----------------------------------------------------------------------------
    def schedule(self) -> ScheduledStep:
        if self.enable_chunked_prefill:
            return self._schedule_mixed()
        if self.waiting and len(self.running) < self.max_num_seqs:
            step = ScheduledStep([], [], [])
            self._admit(step, self.max_num_batched_tokens, chunks=False)
            if step.seqs:
                return step           # a prefill-only step: the decodes wait for it
        step = ScheduledStep([], [], [])
        self._serve_running(step, self.max_num_seqs)
        return step

    def _schedule_mixed(self) -> ScheduledStep:
        step = ScheduledStep([], [], [])
        budget = self._serve_running(step, self.max_num_batched_tokens)
        if not step.preempted:
            self._admit(step, budget, chunks=True)
        return step

    def _serve_running(self, step: ScheduledStep, budget: int) -> int:
        """Schedule the running sequences in arrival order, preempting the newest when blocks run
        out; returns the budget left."""
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            count = min(seq.num_tokens - seq.num_cached, budget)
            while not self.blocks.grow(seq, seq.num_cached + count):
                victim = self.running[-1]
                self._preempt(victim, step)
                if victim is seq:
                    break
            else:
                step.seqs.append(seq)
                step.num_new.append(count)
                budget -= count
                index += 1
                continue
            break   # seq itself was preempted: everything after it was too
        return budget

    def _admit(self, step: ScheduledStep, budget: int, chunks: bool) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            count = self.blocks.admit(seq, budget, whole=not chunks)
            if not count:
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            step.seqs.append(seq)
            step.num_new.append(count)
            budget -= count

    def _preempt(self, seq: Sequence, step: ScheduledStep) -> None:
        self.running.remove(seq)
        self.blocks.free(seq)
        seq.status = Status.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        step.preempted.append(seq)
        if seq in step.seqs:
            raise SchedulerError("a sequence scheduled in this step was preempted")

    # ---- after the step ----------------------------------------------------------------------
    def advance(self, step: ScheduledStep) -> list[Sequence]:
        """Account for a run step: each still-running sequence has ``num_new`` more tokens cached
        (and its new full blocks in the prefix cache). Returns those whose context is now complete,
        which get the step's sampled token."""
        complete = []
        for seq, count in zip(step.seqs, step.num_new):
            if seq.status is not Status.RUNNING:
                continue     # aborted while the step ran
            seq.num_cached += count
            self.blocks.commit(seq)
            if seq.num_cached == seq.num_tokens:
                complete.append(seq)
        return complete


def build_step(seqs: list[Sequence], sliding_window: int | None = None,
               num_new: list[int] | None = None) -> StepBatch:
    """The batch that feeds each sequence ``num_new[i]`` (default: all) of its uncached tokens from
    its ``num_cached`` (a prompt chunk at prefill, the last token at decode) and attends to its context through its slot list (the last ``sliding_window``
    positions only, when the model has one, as HF masks them). Vectorised: one Python iteration per
    sequence, none per token; the slots come from :meth:`Sequence.assign_blocks`."""
    counts = num_new or [None] * len(seqs)
    new_tokens = [seq.new_tokens(count) for seq, count in zip(seqs, counts)]
    B = len(seqs)
    num_new = np.fromiter(map(len, new_tokens), np.int64, B)                   # [B]
    start = np.fromiter((seq.num_cached for seq in seqs), np.int64, B)         # [B]
    context = start + num_new                                                  # [B]
    S, L = int(num_new.max()), int(context.max())
    is_real = np.arange(S) < num_new[:, None]                                  # [B, S]
    input_ids = np.zeros((B, S), dtype=np.int64)
    input_ids[is_real] = np.concatenate(new_tokens)                            # row-major = token order
    positions = start[:, None] + np.arange(S)                                  # [B, S]
    read_slots = np.zeros((B, L), dtype=np.int64)                              # [B, L]
    for row, seq in enumerate(seqs):
        assert len(seq.slots) >= context[row], "a sequence's blocks cover its whole context"
        width = min(L, len(seq.slots))
        read_slots[row, :width] = seq.slots[:width]
    write_slots = np.take_along_axis(read_slots, np.minimum(positions, L - 1), 1)[is_real]   # [N]
    return StepBatch.pack(dict(input_ids=input_ids, positions=positions, context=context,
                               token_index=np.flatnonzero(is_real), write_slots=write_slots,
                               read_slots=read_slots, last_index=num_new - 1), sliding_window)
