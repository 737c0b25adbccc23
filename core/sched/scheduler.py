"""The continuous scheduler (vLLM v1 / nano-vllm shape): requests join and leave the running batch
at any step, and each step is planned within a token budget.

A step first serves the running sequences in arrival order (one token each at decode, the next chunk
of a prompt still in prefill, which leaves a token of the budget to every decode after it), then
admits waiting ones while the budget, ``max_num_seqs`` and the KV blocks allow; a long prompt is split
over steps (chunked prefill), so it never stalls running decodes. The planned step lists its decodes
first (the model runs their attention as decodes, the chunks' as prefill).
Blocks are allocated as sequences grow; when a running sequence cannot grow, the newest running
sequences are preempted (their blocks given back, their tokens recomputed later: cheaply, since their
full blocks usually stay in the prefix cache). Without chunked prefill a step either prefills whole
prompts or decodes (the classic schedule, kept for the ablation).
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

import numpy as np

from .block_manager import BlockManager
from ..errors import SchedulerError
from ..models.batch import StepBatch
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
        self.ended: list[Sequence] = []   # finished since the engine last took them

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
        self.ended.append(seq)

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
        return _decodes_first(step)

    def _serve_running(self, step: ScheduledStep, budget: int) -> int:
        """Schedule the running sequences in arrival order, preempting the newest when blocks run
        out; returns the budget left. A prompt's chunk leaves one token of the budget to each decode
        after it, so every decode gets its token each step whatever is prefilling (vLLM's policy
        for chunked prefill: decodes first, chunks from what is left)."""
        decodes_after = None    # the decodes after this row, counted at the first chunk
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            if seq.is_last_pending:     # its last token is on its way: nothing to feed
                index += 1
                continue
            if _decodes(seq):
                count = 1
                decodes_after = None if decodes_after is None else decodes_after - 1
            else:
                if decodes_after is None:
                    decodes_after = sum(1 for later in self.running[index + 1:] if _decodes(later))
                count = min(seq.num_tokens - seq.num_cached, budget - decodes_after)
                if count < 1:           # no room for a chunk beside the decodes: it waits a step
                    index += 1
                    continue
            while not self.blocks.grow(seq, seq.num_cached + count):
                victim = self.running[-1]
                if decodes_after is not None and victim is not seq and _decodes(victim):
                    decodes_after -= 1
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
            count = self.blocks.admit(seq, budget, whole=not chunks or seq.computes_prompt_whole)
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
        """Account for a launched step: each still-running sequence has ``num_new`` more tokens
        cached (its new full blocks, as far as their tokens are known, in the prefix cache). Those
        whose context is now complete get the step's sampled token: it is pending (``num_pending``,
        ``pending_row``) until the engine reads it back. Returns them."""
        complete = []
        for row, (seq, count) in enumerate(zip(step.seqs, step.num_new)):
            if seq.status is not Status.RUNNING:
                continue     # aborted while the step was planned
            seq.num_cached += count
            self.blocks.commit(seq)
            if seq.num_cached == seq.num_tokens:
                seq.num_pending, seq.pending_row = 1, row
                complete.append(seq)
        return complete


def _decodes_first(step: ScheduledStep) -> ScheduledStep:
    """``step`` with the rows that feed one token first, each group in its order: the model runs
    their attention as decodes and only the rest as prefill (``StepBatch.num_decodes``)."""
    if sum(step.num_new) == len(step.num_new):      # every row feeds one token: already in order
        return step
    order = sorted(range(len(step.seqs)), key=lambda row: step.num_new[row] != 1)
    return ScheduledStep([step.seqs[row] for row in order], [step.num_new[row] for row in order], step.preempted)


def _decodes(seq: Sequence) -> bool:
    """``seq`` feeds one token this step: its newest (a decode)."""
    return seq.num_tokens - seq.num_cached == 1 and not seq.is_last_pending


def build_step(seqs: list[Sequence], num_new: list[int] | None = None, max_blocks: int | None = None, *,
               block_size: int, pad_to: int | None = None, num_prev: int = 0,
               pad_tokens_to: int | None = None) -> StepBatch:
    """The packed step (see :class:`StepBatch`) in which sequence i feeds ``num_new[i]`` tokens from
    its ``num_cached`` on (a prompt chunk, or its one decode token); by default every uncached token.
    Block tables are ``max_blocks`` wide (default: the widest in the step). ``pad_to`` pads a decode
    step to that many rows (padding rows write no KV and attend nothing: see :func:`pad_decode`).
    ``num_prev`` is the previous step's rows kept on the device: a sequence whose last token is still
    pending there (``num_pending``, at ``pending_row``) takes it from them (``token_src``); with 0
    no sequence may have a pending token. ``pad_tokens_to`` pads the tokens of a step that is not a
    pure decode to that many (padding tokens: id 0 at position 0, no slot, in no sequence), for the
    piecewise graphs of that token bucket. Vectorised: the Python work per sequence is reading its lists, none per token."""
    B = len(seqs)
    if B == 0:
        raise ValueError("build_step needs at least one sequence")
    q_lens = np.fromiter((s.num_tokens - s.num_cached for s in seqs) if num_new is None else num_new, np.int64, B)
    start = np.fromiter((s.num_cached for s in seqs), np.int64, B)
    total = np.fromiter((s.num_tokens for s in seqs), np.int64, B)
    n_blocks = np.fromiter((len(s.blocks) for s in seqs), np.int64, B)
    seq_lens = start + q_lens
    width = max_blocks or int(n_blocks.max())
    bad = np.flatnonzero((q_lens < 1) | (seq_lens > total) | (seq_lens > n_blocks * block_size) | (n_blocks > width))
    if bad.size:
        _raise_bad_row(seqs[bad[0]], int(q_lens[bad[0]]), width, block_size)
    T = int(q_lens.sum())
    rows = B if pad_to is None else pad_to
    if pad_to is not None and (T != B or pad_to < B):
        raise ValueError(f"only a decode step of at most {pad_to} rows pads to {pad_to}; this one feeds {T} tokens "
                         f"of {B} sequences")
    tables = np.zeros((rows, width), dtype=np.int32)
    tables[:B][np.arange(width) < n_blocks[:, None]] = np.fromiter(
        itertools.chain.from_iterable(s.blocks for s in seqs), np.int32, int(n_blocks.sum()))
    cu = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(q_lens, out=cu[1:])
    positions = np.repeat(start - cu[:-1], q_lens) + np.arange(T)
    slots = tables[np.repeat(np.arange(B), q_lens), positions // block_size] * np.int64(block_size) + positions % block_size
    if T == B:      # one token a row (decodes): each row's token at its start, no list slicing
        input_ids = np.fromiter(map(Sequence.token_at, seqs, start.tolist()), np.int64, B)
    else:
        input_ids = np.fromiter(itertools.chain.from_iterable(
            s.token_slice(int(a), int(b)) for s, a, b in zip(seqs, start, seq_lens)), np.int64, T)
    token_src = np.arange(num_prev, num_prev + T)
    pending = np.fromiter((s.pending_row if s.num_pending else -1 for s in seqs), np.int64, B)
    feeds = (pending >= 0) & (seq_lens == total)      # rows that feed their pending token: the previous step's
    if feeds.any():
        if pending[feeds].max() >= num_prev:
            raise ValueError(f"sequence {seqs[int(np.argmax(feeds))].index}: its last token is still on the device "
                             f"(a row of the previous step), but the step keeps {num_prev} rows of it")
        token_src[cu[1:][feeds] - 1] = pending[feeds]
    real_tokens = None
    if pad_tokens_to is not None:
        if pad_to is not None or pad_tokens_to < T:
            raise ValueError(f"a step of {T} tokens cannot be padded to {pad_tokens_to} tokens"
                             + (" (and rows)" if pad_to is not None else ""))
        real_tokens = T
        input_ids, positions, slots, token_src = _padded_tokens(input_ids, positions, slots, token_src,
                                                                pad_tokens_to - T, num_prev)
    if pad_to is not None and rows > B:   # padding rows: one padding token each, no context
        input_ids, positions, slots, token_src = _padded_tokens(input_ids, positions, slots, token_src, rows - B,
                                                                num_prev)
        seq_lens = np.concatenate((seq_lens, np.zeros(rows - B, np.int64)))
        cu = np.arange(rows + 1)
    ones = q_lens == 1
    num_decodes = B if ones.all() else int(np.argmin(ones))      # the leading rows that feed one token
    batch = StepBatch.pack(dict(input_ids=input_ids, positions=positions, slot_mapping=slots,
                                last_index=cu[1:] - 1, cu_seqlens_q=cu, seq_lens=seq_lens, block_tables=tables,
                                token_src=token_src),
                           max_q_len=int(q_lens.max()), num_prev=num_prev, num_decodes=num_decodes)
    batch.real_tokens = real_tokens
    if pad_to is not None:
        batch.real_rows = B
    return batch


def _padded_tokens(input_ids, positions, slots, token_src, pad: int, num_prev: int):
    """The per-token fields with ``pad`` padding tokens after them: token 0 at position 0, no slot,
    the host's own (not a previous step's)."""
    T = len(input_ids)
    return (np.concatenate((input_ids, np.zeros(pad, np.int64))), np.concatenate((positions, np.zeros(pad, np.int64))),
            np.concatenate((slots, np.full(pad, -1, np.int64))),
            np.concatenate((token_src, np.arange(num_prev + T, num_prev + T + pad))))


def _raise_bad_row(seq: Sequence, count: int, width: int, block_size: int) -> None:
    end = seq.num_cached + count
    if count < 1 or end > seq.num_tokens:
        raise ValueError(f"sequence {seq.index}: cannot feed {count} token(s) from position {seq.num_cached}; "
                         f"it has {seq.num_tokens} tokens")
    raise ValueError(f"sequence {seq.index}: its {len(seq.blocks)} KV block(s) of {block_size} do not cover its "
                     f"context of {end} tokens in a block table {width} wide")
