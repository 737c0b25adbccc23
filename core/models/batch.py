"""One forward step's inputs: which tokens, at which positions, which KV slots they write and read.

Every index tensor of a step lives in ONE int64 host tensor (``packed``), so moving a step to a
device is one host→device copy; the fields are views into it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: The packed fields, in order, with their shapes in terms of (B, S, L, N).
_LAYOUT = (
    ("input_ids", lambda B, S, L, N: (B, S)),     # padding = 0
    ("positions", lambda B, S, L, N: (B, S)),     # position of each new token in its sequence
    ("context", lambda B, S, L, N: (B,)),         # tokens each sequence attends to after this step
    ("token_index", lambda B, S, L, N: (N,)),     # flat index (into B*S) of the real, non-padding tokens
    ("write_slots", lambda B, S, L, N: (N,)),     # KV slot each real token writes
    ("read_slots", lambda B, S, L, N: (B, L)),    # KV slot of each context position (padding → slot 0)
    ("last_index", lambda B, S, L, N: (B,)),      # index in S of each sequence's last real token
)


@dataclass
class StepBatch:
    """B sequences, each with its new tokens padded to S, reading a context padded to L; N real tokens.

    Built on the host by the scheduler; each rank moves it to its device with :meth:`to` (one copy).
    ``sliding_window`` (or None) limits how far back a query may attend, as HF masks it.
    ``real_rows`` is set on a decode step padded to a graph bucket (see :mod:`anydev.core.graphs`):
    only its first ``real_rows`` rows are sequences.
    """

    packed: torch.Tensor       # [K] int64, every field below one after another
    B: int
    S: int
    L: int
    N: int
    sliding_window: int | None = None
    real_rows: int | None = None

    @classmethod
    def pack(cls, fields: dict[str, np.ndarray], sliding_window: int | None = None) -> "StepBatch":
        B, S = fields["input_ids"].shape
        L, N = fields["read_slots"].shape[1], fields["token_index"].shape[0]
        packed = np.concatenate([np.asarray(fields[name], dtype=np.int64).ravel() for name, _ in _LAYOUT])
        return cls(torch.from_numpy(packed), B, S, L, N, sliding_window)

    def __post_init__(self):
        offset = 0
        for name, shape_of in _LAYOUT:
            shape = shape_of(self.B, self.S, self.L, self.N)
            size = int(np.prod(shape))
            setattr(self, name, self.packed[offset:offset + size].view(shape))
            offset += size
        if offset != self.packed.numel():
            raise ValueError(f"packed step holds {self.packed.numel()} ids, its shapes need {offset}")

    def to(self, device) -> "StepBatch":
        """This step on ``device``: one copy of ``packed`` (no host wait for pageable memory)."""
        return StepBatch(self.packed.to(device, non_blocking=True), self.B, self.S, self.L, self.N,
                         self.sliding_window, self.real_rows)

    @property
    def num_tokens(self) -> int:
        return self.N

    @property
    def is_decode(self) -> bool:
        """One new token per sequence: no padding, every query is its sequence's last position."""
        return self.S == 1

    def attention_mask(self) -> torch.Tensor:
        """[B, 1, S, L] bool, made where the step lives: may this query attend this key."""
        keys = torch.arange(self.L, device=self.packed.device)
        if self.is_decode:   # the query sits at context - 1: causal == inside the context
            mask = (keys < self.context[:, None])[:, None, None, :]
        else:
            mask = (keys <= self.positions[:, :, None]) & (keys < self.context[:, None, None])
            mask = mask[:, None]
        if self.sliding_window:
            mask = mask & (keys > self.positions[:, None, :, None] - self.sliding_window)
        return mask
