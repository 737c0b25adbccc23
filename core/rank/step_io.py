"""A rank's step inputs and sampled tokens in persistent memory, so the host never waits for the
device between steps.

One device buffer holds ``[logprobs rows | P int64: the last step's sampled tokens | the packed
step]`` (after the first part, the layout of :class:`~anydev.core.models.batch.StepBatch` with
``num_prev`` P): every step, eager or a graph replay, reads its inputs there, and a token the host
has not read back yet is taken from the token slots on the device (``token_src``). A step's bytes go
in through a ring of two pinned host buffers (the host fills one while the device may still copy out
of the other); sampled tokens come back through another ring of two, each with an event, so the
engine reads step N's tokens after it has launched step N+1. A step whose requests ask for logprobs
writes its packed rows (:mod:`~anydev.core.sched.logprobs`) so that they end where the token slots
begin (:meth:`StepIO.logprob_rows`): its tokens and rows come back in one copy, behind one event.
Everything goes through the device API (alloc, alloc_host, memcpy_async, events).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from anydev.plugin_api import Device, Stream

from ..models.batch import StepBatch
from ..loading.staging import PinnedStaging
from ..sched.logprobs import MAX_LOGPROBS

#: The float32 values of one packed logprobs row at most (see ``sched.logprobs.pack_logprobs``).
LOGPROB_WIDTH = 1 + 2 * MAX_LOGPROBS
#: Alignment of the logprobs rows' start and of the token slots (bytes).
_ALIGN = 256


@dataclass(frozen=True)
class TokenTicket:
    """Where a launched step's sampled tokens arrive: readback buffer ``slot``, ``rows`` tokens, and
    the shape of its packed logprobs (None: no row asked for them)."""

    slot: int
    rows: int
    logprobs: tuple[int, int] | None = None


class SampledTokens(list):
    """A step's sampled tokens (a list of ints, row by row) and, in ``logprobs``, its packed logprobs
    rows ([rows that asked, width] float32) or None."""

    logprobs: np.ndarray | None = None


class StepIO:
    """``num_prev`` token slots (the most rows a step has) and room for steps of up to
    ``max_step_bytes`` packed bytes. Call on the rank's thread; ``publish`` inside its torch stream."""

    def __init__(self, device: Device, stream: Stream, num_prev: int, max_step_bytes: int,
                 max_logprob_rows: int | None = None):
        self.stream = stream
        self.num_prev = num_prev
        self.max_step_bytes = max_step_bytes
        #: Packed logprobs rows a step may send back (its sampled rows and its prompts' positions).
        self.max_logprob_rows = max_logprob_rows or num_prev
        self._objects = []
        #: Bytes before the token slots, where a step's logprobs rows end.
        self._lp_bytes = -(-4 * self.max_logprob_rows * LOGPROB_WIDTH // _ALIGN) * _ALIGN
        try:
            self.buffer = self._own(device.alloc(self._lp_bytes + 8 * num_prev + max_step_bytes))
            whole = self.buffer.as_tensor()
            self._logprob_device = whole[:self._lp_bytes]
            self.inputs = whole[self._lp_bytes:]
            self.prev_tokens = self.inputs[:8 * num_prev].view(torch.int64)
            self.staging = self._own(PinnedStaging(device, 2 * max_step_bytes, count=2))
            # each readback mirrors the device buffer's first two parts: rows, then tokens
            self._readback = [self._own(device.alloc_host(self._lp_bytes + 8 * num_prev)) for _ in range(2)]
            self._bytes = [host.numpy(np.uint8) for host in self._readback]
            self._arrays = [array[self._lp_bytes:].view(np.int64) for array in self._bytes]
            self._events = [self._own(device.create_event()) for _ in range(2)]
        except BaseException:
            self.close()
            raise
        self._next = 0

    def _own(self, obj):
        self._objects.append(obj)
        return obj

    def put(self, batch: StepBatch) -> StepBatch:
        """Copy ``batch`` (on the host, ``num_prev`` matching) into the device buffer, through
        pinned memory, in stream order; returns the step as it sits there."""
        nbytes = batch.packed.numel()
        if batch.num_prev != self.num_prev or nbytes > self.max_step_bytes:
            raise ValueError(f"a step of {nbytes} bytes after {batch.num_prev} token slots does not fit this rank's "
                             f"input buffer ({self.max_step_bytes} bytes after {self.num_prev} slots)")
        index, host, array = self.staging.acquire()
        array[:nbytes] = batch.packed.numpy()
        self.stream.memcpy_async(self.buffer, host, nbytes, dst_offset=self._lp_bytes + 8 * self.num_prev)
        self.staging.release(index, self.stream)
        return batch.placed(self.inputs)

    def logprob_rows(self, rows: int, width: int) -> torch.Tensor:
        """The device view [rows, width] float32 where a step's packed logprobs rows go (they end
        where the token slots begin, so :meth:`publish` reads them back in the tokens' copy).
        Rewritten by the next step's rows, in stream order."""
        if rows > self.max_logprob_rows or width > LOGPROB_WIDTH:
            raise ValueError(f"a step's {rows} logprobs rows of {width} values do not fit this rank's readback "
                             f"({self.max_logprob_rows} rows of {LOGPROB_WIDTH} at most)")
        start = self._rows_start(rows, width)
        return self._logprob_device[start:start + 4 * rows * width].view(torch.float32).view(rows, width)

    def _rows_start(self, rows: int, width: int) -> int:
        return self._lp_bytes - -(-4 * rows * width // 16) * 16

    def publish(self, tokens: torch.Tensor, read_back: bool, logprobs: torch.Tensor | None = None) -> TokenTicket | None:
        """Store a step's sampled ``tokens`` [rows] (int64, on the device) where the next step takes
        them; with ``read_back``, also start copying them to the host (see :meth:`read`). A negative
        token (a row whose sampling failed: see ``sampling.ROW_FAILURES``) is kept and read back as it
        is; the next step embeds token 0 in its place (``StepBatch.embedding_ids``). ``logprobs``: the
        step's packed logprobs rows (on the device), read back in the same copy as the tokens; rows
        written in place (into :meth:`logprob_rows` of their shape) are not copied again."""
        rows = tokens.shape[0]
        self.prev_tokens[:rows].copy_(tokens)
        if not read_back:
            return None
        slot, self._next = self._next, self._next ^ 1
        start, shape = self._lp_bytes, None
        if logprobs is not None and logprobs.numel():
            shape = tuple(logprobs.shape)
            place = self.logprob_rows(*shape)
            if place.data_ptr() != logprobs.data_ptr():
                place.copy_(logprobs)
            start = self._rows_start(*shape)
        self.stream.memcpy_async(self._readback[slot], self.buffer, self._lp_bytes - start + 8 * rows,
                                 dst_offset=start, src_offset=start)
        self.stream.record(self._events[slot])
        return TokenTicket(slot, rows, shape)

    def read(self, ticket: TokenTicket) -> SampledTokens:
        """The tokens of a published step, once the device has them (waits for that step only)."""
        self._events[ticket.slot].synchronize()
        tokens = SampledTokens(self._arrays[ticket.slot][:ticket.rows].tolist())
        if ticket.logprobs is not None:
            rows, width = ticket.logprobs
            start = self._rows_start(rows, width)
            tokens.logprobs = self._bytes[ticket.slot][start:start + 4 * rows * width].view(np.float32) \
                .reshape(rows, width).copy()
        return tokens

    def close(self) -> None:
        """Wait for the copies in flight, then free everything (the first error raised after all)."""
        errors = []
        try:
            if self._objects:
                self.stream.synchronize()
        except Exception as exc:  # raised below, after everything was freed
            errors.append(exc)
        for obj in reversed(self._objects):
            try:
                obj.close()
            except Exception as exc:  # raised below, after the rest was freed
                errors.append(exc)
        self._objects = []
        if errors:
            raise errors[0]
