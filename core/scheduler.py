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


def build_step(seqs: list[Sequence], num_new: list[int] | None = None, max_blocks: int | None = None) -> StepBatch:
    """The packed step (see :class:`StepBatch`) in which sequence i feeds ``num_new[i]`` tokens from
    its ``num_cached`` on (a prompt chunk, or its one decode token); by default every uncached token.
    Block tables are ``max_blocks`` wide (default: the widest in the step). One Python iteration per
    sequence, none per token; the slots come from :meth:`Sequence.assign_blocks`."""
    B = len(seqs)
    if B == 0:
        raise ValueError("build_step needs at least one sequence")
    if num_new is None:
        num_new = [seq.num_tokens - seq.num_cached for seq in seqs]
    q_lens = np.asarray(num_new, dtype=np.int64)
    start = np.fromiter((seq.num_cached for seq in seqs), np.int64, B)
    seq_lens = start + q_lens
    cu = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(q_lens, out=cu[1:])
    width = max_blocks or max(len(seq.blocks) for seq in seqs)
    tables = np.zeros((B, width), dtype=np.int32)
    input_ids, slots = [], []
    for row, seq in enumerate(seqs):
        first, end = seq.num_cached, int(seq_lens[row])
        if q_lens[row] < 1 or end > seq.num_tokens:
            raise ValueError(f"sequence {seq.index}: cannot feed {q_lens[row]} token(s) from position {first}; "
                             f"it has {seq.num_tokens} tokens")
        if seq.slots is None or len(seq.slots) < end or len(seq.blocks) > width:
            raise ValueError(f"sequence {seq.index}: its {len(seq.blocks)} KV block(s) do not cover its context "
                             f"of {end} tokens in a block table {width} wide")
        input_ids.append(seq.token_slice(first, end))
        slots.append(seq.slots[first:end])
        tables[row, :len(seq.blocks)] = seq.blocks
    T = int(cu[-1])
    positions = np.repeat(start - cu[:-1], q_lens) + np.arange(T)
    return StepBatch.pack(dict(input_ids=np.concatenate(input_ids), positions=positions,
                               slot_mapping=np.concatenate(slots), last_index=cu[1:] - 1, cu_seqlens_q=cu,
                               seq_lens=seq_lens, block_tables=tables), max_q_len=int(q_lens.max()))
