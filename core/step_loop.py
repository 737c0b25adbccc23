"""The engine's step loop: plan a step, launch it on every rank, hand each sequence its sampled token.

Decode steps run as device graphs (:mod:`.rank.graphs`), captured per batch bucket at start-up, when
the backend offers them (contract 1.1's optional ``torch_graph``) and ``EngineConfig.use_graphs`` is
true; other steps (prompts, prompt chunks beside decodes) replay piecewise graphs per token bucket
(:mod:`.rank.piecewise`). The host builds and launches step N+1 while the device runs step N
(``EngineConfig.async_steps``, :mod:`.rank.step_io`).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable

from .errors import EngineClosedError, SchedulerError
from .micro_batches import micro_batch_bounds
from .sched.logprobs import StepLayout, step_layout, unpack_logprobs
from .sched.logits_processors import uses_history
from .sched.sampling import NO_SEED, ROW_FAILURES, SamplingParams
from .sched.scheduler import ScheduledStep, Sequence, Status
from .stats import count_step
from .step_padding import padded_step
from .stop_strings import finish_reason


class StepLoop:
    """:class:`~.engine.InferEngine`'s step loop (a part of the engine: its state is the engine's)."""

    def step(self) -> list[Sequence]:
        """Plan and launch one step, then read back the tokens of the step launched before it
        (``async_steps``; otherwise of this one). Returns the sequences that got a token (finished
        ones included). Raises :class:`EngineClosedError` once the engine is closed."""
        with self._step_lock:
            self._check_open()
            self.executor.check()
            with self._lock:
                plan = self.scheduler.schedule()
                ended = self._take_ended() if plan.seqs else ()
            previous, self._inflight = self._inflight, None
            if not plan.seqs:
                if previous is None:
                    if self.scheduler.has_work:
                        raise SchedulerError("requests wait but none could be scheduled (a scheduler bug)")
                    return []
                return self._take_tokens(previous, self._read_tokens(previous.ticket))
            start, decode = time.perf_counter(), plan.is_decode   # (before the previous tokens change the sequences)
            batch = self.build_step(plan.seqs, plan.num_new)
            params = _row_params(plan)
            layout = step_layout(params, [0, *itertools.accumulate(plan.num_new)])
            built = time.perf_counter()
            ticket, tokens = self._run_step(batch, plan, params, previous.ticket if previous else None, ended)
            got = self._take_tokens(previous, tokens) if previous else []
            with self._lock:
                launched = _Launched(ticket, [(seq, seq.pending_row) for seq in self.scheduler.advance(plan)],
                                     plan.num_tokens, decode, start, built, *_packed_rows(layout))
            if self.async_steps:
                self._inflight = launched
            else:
                got += self._take_tokens(launched, self._read_tokens(ticket))
            if self.pending_graphs:   # while this step runs on the device
                self._capture_next((batch.B, None) if batch.real_rows is not None else
                                   (None, batch.T) if batch.real_tokens is not None else None)
            return got

    def capture_next_graph(self) -> bool:
        """Capture one bucket's graphs that start-up left out (``EngineConfig.lazy_graphs``), on every
        rank; steps call it themselves, and a caller with nothing to step (an idle server) may too.
        Returns whether any bucket was left to capture."""
        with self._step_lock:
            self._check_open()
            if not self.pending_graphs:
                return False
            self._capture_next(None)
            return True

    def _capture_next(self, wanted) -> None:
        """Capture ``wanted`` (a pending bucket a step just ran eagerly) if pending, else the smallest pending."""
        bucket = wanted if wanted in self.pending_graphs else self.pending_graphs[0]
        self.pending_graphs.remove(bucket)
        self.executor.wait_step(self.executor.run("capture_bucket", *bucket))

    def _read_tokens(self, ticket) -> list[int]:
        """The sampled tokens of a launched step, read on the sampling rank's thread."""
        return self.executor.sampled_tokens(ticket)

    def _take_tokens(self, launched: "_Launched", tokens: list[int]) -> list[Sequence]:
        """Give each sequence of a launched step its sampled token (those finished meanwhile drop it)."""
        self._account(launched)
        got = []
        packed = getattr(tokens, "logprobs", None)     # kept as row views: TokenLogprobs are built when read
        out_rows, prompt_rows = launched.logprob_rows, launched.prompt_rows
        with self._lock:
            for seq, row in launched.rows:
                seq.num_pending = 0
                if seq.status is not Status.FINISHED:
                    token = tokens[row]
                    if packed is not None and token >= 0:
                        if row in prompt_rows:
                            _take_prompt_logprobs(seq, packed, prompt_rows[row])
                        mine = out_rows.get(row)
                        if mine is not None:
                            seq.logprob_rows.add(packed[mine], seq.sampling.logprobs)
                    self._append_token(seq, token)
                    got.append(seq)
        return got

    def _append_token(self, seq: Sequence, token: int) -> None:
        if token < 0:          # its sampling failed: this request ends, the engine goes on
            seq.error = ROW_FAILURES[token]
            self.scheduler.finish(seq, "error")
            return
        seq.output.append(token)
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        reason = finish_reason(seq, token)
        if reason:
            self.scheduler.finish(seq, reason)

    def _drive_until(self, done: Callable[[], bool]) -> None:
        """Run steps on this thread until ``done()`` (other threads' requests advance too)."""
        while not done():
            if self._closed:
                raise EngineClosedError("the engine was closed while this generate call was running")
            self.step()

    def _account(self, launched: "_Launched") -> None:
        """Count a step whose tokens are back (see :func:`~.stats.count_step`)."""
        self._last_done = count_step(self._stats, launched, self._last_done)

    def build_step(self, seqs: list[Sequence], num_new: list[int] | None = None):
        """The step batch in which sequence i feeds ``num_new[i]`` tokens from its ``num_cached`` on
        (default: all its uncached tokens); a pure decode step is padded to its graph bucket when
        decode graphs are on. Pass it to :meth:`_run_step`."""
        return padded_step(seqs, num_new, block_size=self.config.block_size, max_num_seqs=self.config.max_num_seqs,
                           max_blocks_per_seq=self.max_blocks_per_seq, uses_graphs=self.uses_graphs,
                           token_buckets=self.token_buckets)

    def _take_ended(self) -> tuple[int, ...]:
        """Under the lock: the ids of the seeded sequences that ended since the last step was
        launched (the next step tells the sampler to drop their generators)."""
        ended, self.scheduler.ended = self.scheduler.ended, []
        return tuple(seq.seq_id for seq in ended if _keeps_state(seq.sampling))

    def _run_step(self, batch, plan: ScheduledStep, params: list[SamplingParams | None], read=None,
                  ended: tuple[int, ...] = ()):
        """Launch one step on every rank; returns rank 0's ticket for its tokens and, when ``read``
        (an earlier step's ticket) is given, that step's tokens. Rows whose context the step does not
        complete (prefill chunks) need no token. A seeded row is sampled with its sequence's generator,
        kept on the sampler (``seeds``: its id and seed), as are a penalized row's token record and a
        constrained row's grammar matcher; ``ended``: the sequences whose state goes. ``params``:
        :func:`_row_params` of ``plan``."""
        seeds = [_row_key(seq, p) for seq, p in zip(plan.seqs, params)]
        if self.config.pp > 1:
            return self._run_pipeline_step(plan, params, seeds, ended), None
        share = self.async_steps and len(self.workers) > 1
        futures = self.executor.run("forward", batch, params, seeds, share, None, ended,
                                    sampler_args=(batch, params, seeds, share, read, ended))
        self.executor.wait_step(futures)
        return futures[0].result()

    def _run_pipeline_step(self, plan: ScheduledStep, params, seeds, ended):
        """Launch one step on every stage (pp > 1), split into micro-batches; the sampler's ticket."""
        bounds = micro_batch_bounds(len(plan.seqs), plan.is_decode, self.config.pp)
        batches = [self.build_step(plan.seqs[a:b], plan.num_new[a:b]) for a, b in bounds]
        futures = self.executor.run("forward_stage", batches, [params[a:b] for a, b in bounds],
                                    [seeds[a:b] for a, b in bounds], ended)
        self.executor.wait_step(futures)
        return futures[self.executor.layout.sampler].result()


@dataclass
class _Launched:
    """A launched step: where rank 0's sampled tokens arrive, the row of each sequence that gets one,
    and what the step's accounting needs (tokens fed, whether a decode step, start and built times)."""

    ticket: object
    rows: list[tuple[Sequence, int]]
    num_tokens: int
    decode: bool
    start: float
    built: float
    #: row -> the packed row of its sampled token's logprobs (rows that asked for them)
    logprob_rows: dict[int, int]
    #: row -> the packed rows (first, end) of its prompt positions' logprobs (rows that score their prompt)
    prompt_rows: dict[int, tuple[int, int]]


_NO_ROWS: dict = {}


def _packed_rows(layout: StepLayout) -> tuple[dict[int, int], dict[int, tuple[int, int]]]:
    """Where each row's packed logprobs rows are (see ``sched.logprobs``: a row's prompt positions, then
    its token): its sampled token's row, and its prompt positions' rows (first, end)."""
    if not layout.prompt:       # decode steps: the asking rows' tokens, in row order
        return ({row: i for i, row in enumerate(layout.output)} if layout.output else _NO_ROWS), _NO_ROWS
    mine, prompt, cursor = {}, {}, 0
    counts = {row: count for row, _, count in layout.prompt}
    output = set(layout.output)
    for row in sorted(counts.keys() | output):
        if row in counts:
            prompt[row] = (cursor, cursor + counts[row])
            cursor += counts[row]
        if row in output:
            mine[row] = cursor
            cursor += 1
    return mine, prompt


def _take_prompt_logprobs(seq: Sequence, packed, rows: tuple[int, int]) -> None:
    """Give ``seq`` its prompt's logprobs from a step's packed rows ``packed`` (``rows``: its prompt
    positions' rows), the top lists cut to what it asked for, once the step holds its whole prompt."""
    if seq.scores_prompt and rows[1] - rows[0] >= len(seq.prompt) - 1:
        seq.prompt_logprobs = unpack_logprobs(packed[rows[0]:rows[0] + len(seq.prompt) - 1],
                                              seq.sampling.prompt_logprobs)


def _row_key(seq: Sequence, params: SamplingParams | None) -> tuple[int, int] | None:
    """A sampled row's ``(sequence id, seed)`` for the sampler, where it keeps state for the sequence
    (a seeded generator, a penalties' token record, a grammar matcher: seed ``NO_SEED`` then); None otherwise."""
    if params is None or not _keeps_state(params):
        return None
    return seq.seq_id, (params.seed if params.seed is not None else NO_SEED)


def _keeps_state(params: SamplingParams) -> bool:
    """The sampler keeps state for the request's sequences (it says when they end)."""
    return params.seed is not None or uses_history(params) or params.structured is not None


def _row_params(plan: ScheduledStep) -> list[SamplingParams | None]:
    """Each row's sampling parameters, None for a row that needs no token (a prompt chunk short of its end)."""
    return [seq.sampling if seq.num_cached + n == seq.num_tokens else None for seq, n in zip(plan.seqs, plan.num_new)]

