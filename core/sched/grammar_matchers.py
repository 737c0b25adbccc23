"""The sampling rank's grammar matchers: one per constrained sequence, advanced by each token it
samples, and the token bitmask of the rows of a step, filled on the host.

A step's tokens reach the matchers at the next step, after that step's forward is launched (the host
then waits for the earlier step's tokens only, while the device runs the new forward), so the masks
of step N+1 are computed while the device runs step N+1's layers; the mask then goes to the device
and is applied to the logits before the token is drawn (:func:`apply_token_bitmask`).
"""
from __future__ import annotations

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

    # ---- the tokens ------------------------------------------------------------------------------
    def sampled(self, ticket, rows: list[tuple[int, int]]) -> None:
        """A step was published with ``ticket``; its rows ``rows`` ((row, sequence id)) are constrained."""
        self._unread = (ticket, rows) if rows else None

    def catch_up(self, read) -> None:
        """Feed each matcher the token its sequence sampled in the step published last (``read(ticket)``
        gives that step's tokens; it waits for that step only). A negative token (a failed row)
        and a token after the grammar finished advance nothing; a token the grammar rejects puts its
        sequence in :meth:`rejection`."""
        if self._unread is None:
            return
        ticket, rows = self._unread
        self._unread = None
        tokens = read(ticket)
        for row, seq_id in rows:
            matcher, token = self._by_seq.get(seq_id), tokens[row]
            if matcher is None or token < 0 or matcher.is_stopped() or seq_id in self._rejected:
                continue
            if not matcher.consume_token(token):
                self._rejected[seq_id] = f"token {token} was sampled against the grammar: {matcher.get_error()}"

    def rejection(self, seq_id: int) -> str | None:
        """Why ``seq_id``'s grammar stopped accepting its tokens (None: it accepts them)."""
        return self._rejected.get(seq_id)

    # ---- the masks -------------------------------------------------------------------------------
    def fill(self, rows: list[tuple[int, StructuredOutput]], out: np.ndarray) -> None:
        """Fill ``out[i]`` (int32, :attr:`words` per row: bit j of word w allows token 32w + j) with the
        tokens the grammar of ``rows[i]`` ((sequence id, its constraint)) allows next; a sequence
        seen for the first time gets its matcher."""
        matchers = [(self._matcher(seq_id, structured), i) for i, (seq_id, structured) in enumerate(rows)]
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
