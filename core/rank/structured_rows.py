"""The sampling rank's part in structured output: each step's constrained rows, their token bitmask
filled on the host, most of it ahead on the matchers' worker thread
(:class:`~anydev.core.sched.grammar_matchers.GrammarMatchers`), and copied to the device with the rows' indices through pinned memory, in stream order, without waiting for the device.

The pinned buffers and the device buffer are allocated the first time a step has a constrained
row, so a rank that never serves one holds none of it."""
from __future__ import annotations

import torch

from anydev.plugin_api import Device, Stream

from ..loading.staging import PinnedStaging
from ..sched.grammar_matchers import GrammarMatchers
from ..sched.sampling import GRAMMAR_REJECTED, SamplingParams


class StructuredRows:
    """Used by the sampler, in one step: :meth:`start_step`, then :meth:`masks` (once per micro-batch
    under pp, ``offset`` its first row in the step), :meth:`rejected`, and :meth:`published` once the
    step's tokens are published."""

    def __init__(self, tokenizer, vocab_size: int, device: Device, stream: Stream, max_rows: int):
        self.matchers = GrammarMatchers(tokenizer, vocab_size)
        self.device, self.stream, self.max_rows = device, stream, max_rows
        self._staging: PinnedStaging | None = None
        self._device_mask = None
        self._rows: list[tuple[int, int]] = []

    def start_step(self, read) -> None:
        """Advance the matchers by the tokens of the step published last (``read(ticket)``: its tokens)."""
        self.matchers.catch_up(read)
        self._rows = []

    def masks(self, sampling: list[SamplingParams | None], keys: list[tuple[int, int] | None],
              offset: int = 0) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The constrained rows of ``sampling`` (their indices [R], None when every row is, and their
        bitmask [R, words], on the device), or None when no row has a constraint. ``keys[i]``: row i's
        (sequence id, seed)."""
        rows = [(i, keys[i][0], p.structured) for i, p in enumerate(sampling) if p is not None and p.structured]
        if not rows:
            return None
        self._rows += [(offset + i, seq_id) for i, seq_id, _ in rows]
        words, count = self.matchers.words, len(rows)
        index, host, array = self._staging_().acquire()
        # [the rows' indices: max_rows int64 | their bitmask: count x words int32], one copy to the device
        indices = array[:8 * count].view("int64")
        indices[:] = [i for i, _, _ in rows]
        start = 8 * self.max_rows
        bits = array[start:start + 4 * count * words].view("int32").reshape(count, words)
        self.matchers.fill([(seq_id, structured) for _, seq_id, structured in rows], bits)
        self.stream.memcpy_async(self._device_mask, host, start + 4 * count * words)
        self._staging.release(index, self.stream)
        placed = self._device_mask.as_tensor()
        bitmask = placed[start:start + 4 * count * words].view(torch.int32).view(count, words)
        if count == len(sampling):     # every row (their indices in order): masked in place
            return None, bitmask
        return placed[:8 * count].view(torch.int64), bitmask

    def rejected(self, tokens: torch.Tensor, keys: list[tuple[int, int] | None]) -> None:
        """Give the rows whose sequence's grammar rejected one of its tokens :data:`GRAMMAR_REJECTED`."""
        for i, key in enumerate(keys):
            if key is not None and self.matchers.rejection(key[0]) is not None:
                tokens[i] = GRAMMAR_REJECTED

    def published(self, ticket, read) -> None:
        """The step's tokens went out with ``ticket`` (``read(ticket)``: them, once the device has them):
        the matchers' worker feeds them to the constrained rows' matchers and fills their next masks."""
        self.matchers.sampled(ticket, self._rows, read)
        self._rows = []

    def _staging_(self) -> PinnedStaging:
        if self._staging is None:
            nbytes = 8 * self.max_rows + 4 * self.max_rows * self.matchers.words
            self._staging = PinnedStaging(self.device, 2 * nbytes, count=2)
            self._device_mask = self.device.alloc(nbytes)
        return self._staging

    def close(self) -> None:
        try:
            self.matchers.close()     # its worker may be reading the step's tokens
        finally:
            for obj in (self._staging, self._device_mask):
                if obj is not None:
                    obj.close()
            self._staging = self._device_mask = None
