"""The sampling rank's grammar matchers: one per constrained sequence, advanced by each token it
samples, and the token bitmask of the rows of a step, filled on the host.

A step's tokens reach the matchers on a worker thread as soon as the device has them: once step N is
published, the thread waits for its tokens, feeds them to the matchers and fills the masks those
sequences need next, while the host builds and launches step N+1 (llguidance fills masks without
holding the GIL). Step N+1's sampling waits for that work, takes the masks ready and fills only
those of sequences new to the step; the mask then goes to the device and is applied to the logits
before the token is drawn (:func:`apply_token_bitmask`). Without a ``read`` for the thread
(:meth:`GrammarMatchers.sampled`), the tokens reach the matchers at the next step's start instead.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from .structured import StructuredOutput, library


class GrammarMatchers:
    """Matchers by sequence id, over ``tokenizer`` (an anydev :class:`~anydev.core.loading.tokenizer.
    Tokenizer`) and a vocabulary of ``vocab_size`` logits. The llguidance tokenizer is built the
    first time a constrained sequence samples (its cost grows with the vocabulary: ~1 s at 128k)."""

    def __init__(self, tokenizer, vocab_size: int):
        self._tokenizer, self.vocab_size = tokenizer, vocab_size
        self._lltokenizer = None
        self._executor = None
        self._by_seq: dict[int, object] = {}
        self._rejected: dict[int, str] = {}
        #: The last published step's constrained rows: (its ticket, [(row, sequence id)]).
        self._unread: tuple[object, list[tuple[int, int]]] | None = None
        self.words = (vocab_size + 31) // 32
        self._worker: ThreadPoolExecutor | None = None
        self._pending: Future | None = None       # the worker's catch-up and masks of the step published last
        self._ready: tuple[dict[int, int], np.ndarray] | None = None   # masks filled ahead: {seq id: row}, rows

    # ---- the tokens ------------------------------------------------------------------------------
    def sampled(self, ticket, rows: list[tuple[int, int]], read=None) -> None:
        """A step was published with ``ticket``; its rows ``rows`` ((row, sequence id)) are constrained.
        With ``read`` (``read(ticket)``: that step's tokens, waiting for that step only, callable from
        another thread) the worker thread catches up and fills those sequences' next masks now."""
        self._unread = (ticket, rows) if rows else None
        self._ready = None
        if rows and read is not None:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="anydev-grammar")
            self._pending = self._worker.submit(self._ahead, read)

    def _ahead(self, read) -> None:
        """The worker's job: catch up, then fill the masks of the sequences that just advanced."""
        seq_ids = self._consume(read)
        masks = np.empty((len(seq_ids), self.words), dtype=np.int32)
        self._compute([(self._by_seq[seq_id], i) for i, seq_id in enumerate(seq_ids)], masks)
        self._ready = ({seq_id: i for i, seq_id in enumerate(seq_ids)}, masks)

    def catch_up(self, read) -> None:
        """Feed each matcher the token its sequence sampled in the step published last (``read(ticket)``
        gives that step's tokens; it waits for that step only), or wait for the worker doing so (its
        error raised here). A negative token (a failed row) and a token after the grammar finished
        advance nothing; a token the grammar rejects puts its sequence in :meth:`rejection`."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()
        else:
            self._consume(read)

    def _consume(self, read) -> list[int]:
        """:meth:`catch_up`'s work; returns the ids of the sequences it saw that have a matcher."""
        if self._unread is None:
            return []
        ticket, rows = self._unread
        self._unread = None
        tokens = read(ticket)
        seen = []
        for row, seq_id in rows:
            matcher, token = self._by_seq.get(seq_id), tokens[row]
            if matcher is None:
                continue
            seen.append(seq_id)
            if token < 0 or matcher.is_stopped() or seq_id in self._rejected:
                continue
            if not matcher.consume_token(token):
                self._rejected[seq_id] = f"token {token} was sampled against the grammar: {matcher.get_error()}"
        return seen

    def rejection(self, seq_id: int) -> str | None:
        """Why ``seq_id``'s grammar stopped accepting its tokens (None: it accepts them)."""
        return self._rejected.get(seq_id)

    # ---- the masks -------------------------------------------------------------------------------
    def fill(self, rows: list[tuple[int, StructuredOutput]], out: np.ndarray) -> None:
        """Fill ``out[i]`` (int32, :attr:`words` per row: bit j of word w allows token 32w + j) with the
        tokens the grammar of ``rows[i]`` ((sequence id, its constraint)) allows next; a sequence
        seen for the first time gets its matcher."""
        ready, filled = self._ready or ({}, None)
        todo = []
        for i, (seq_id, structured) in enumerate(rows):
            if seq_id in ready:
                out[i] = filled[ready[seq_id]]
            else:
                todo.append((self._matcher(seq_id, structured), i))
        if todo:
            self._compute(todo, out)

    def _compute(self, matchers: list, out: np.ndarray) -> None:
        """Fill ``out[i]`` for each ``(matcher, i)`` of ``matchers`` (llguidance's threads, no GIL held)."""
        if matchers:
            self._executor_().unsafe_compute_mask_ptr(matchers, out.ctypes.data, 4 * self.words, out.shape[0])

    def _matcher(self, seq_id: int, structured: StructuredOutput):
        matcher = self._by_seq.get(seq_id)
        if matcher is None:
            llguidance = library()
            matcher = llguidance.LLMatcher(self._tokenizer_(), structured.grammar(), log_level=0)
            if matcher.is_error():    # validated on admission: a grammar that fails here is a bug
                raise RuntimeError(f"sequence {seq_id}'s grammar failed to build: {matcher.get_error()}")
            self._by_seq[seq_id] = matcher
        return matcher

    def _tokenizer_(self):
        if self._lltokenizer is None:
            tokenizer = self._tokenizer
            if tokenizer is None:
                raise RuntimeError("structured output needs the model's tokenizer, and this checkpoint has none")
            self._lltokenizer = library().LLTokenizer(tokenizer.backend.to_str(), n_vocab=self.vocab_size,
                                                      eos_token=list(tokenizer.eos_token_ids) or None)
        return self._lltokenizer

    def _executor_(self):
        if self._executor is None:
            self._executor = library().LLExecutor()
        return self._executor

    # ---- bookkeeping -----------------------------------------------------------------------------
    def drop(self, seq_ids) -> None:
        """Forget the matchers of sequences that ended (ids it never saw are fine)."""
        for seq_id in seq_ids:
            self._by_seq.pop(seq_id, None)
            self._rejected.pop(seq_id, None)

    def seq_ids(self) -> list[int]:
        return sorted(self._by_seq)

    def close(self) -> None:
        """Wait for the worker's work in flight (its error raised), then stop the worker."""
        pending, self._pending = self._pending, None
        try:
            if pending is not None:
                pending.result()
        finally:
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None


def apply_token_bitmask(logits: torch.Tensor, rows: torch.Tensor | None, bitmask: torch.Tensor) -> None:
    """Set to -inf, in place, the logits [B, V] of rows ``rows`` [R] (int64; None: every row, in order)
    at the tokens their ``bitmask`` [R, ceil(V/32)] (int32, on the device) does not allow: a few
    kernels over [R, V], no host sync."""
    vocab = logits.shape[-1]
    one = torch.ones(32, dtype=torch.int32, device=bitmask.device)
    bits = one << torch.arange(32, dtype=torch.int32, device=bitmask.device)     # bit 31: the sign bit
    refused = (bitmask.unsqueeze(-1) & bits).eq(0).view(bitmask.shape[0], -1)[:, :vocab]
    if rows is None:
        logits.masked_fill_(refused, float("-inf"))
    else:
        logits[rows] = logits[rows].masked_fill(refused, float("-inf"))
