"""One forward step's inputs: which tokens, at which positions, which KV slots they write and read."""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class StepBatch:
    """B sequences, each with its new tokens padded to S, reading a context padded to L.

    Built on the host by the scheduler; each rank moves it to its device with :meth:`to`.
    """

    input_ids: torch.Tensor    # [B, S] int64, padding = 0
    positions: torch.Tensor    # [B, S] int64 position of each new token in its sequence
    token_index: torch.Tensor  # [N] int64 flat index (into B*S) of the real, non-padding tokens
    write_slots: torch.Tensor  # [N] int64 KV slot each real token writes
    read_slots: torch.Tensor   # [B, L] int64 KV slot of each context position (padding → slot 0)
    mask: torch.Tensor         # [B, 1, S, L] bool: may this query attend this key
    last_index: torch.Tensor   # [B] int64 index in S of each sequence's last real token

    def to(self, device) -> "StepBatch":
        return StepBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    @property
    def num_tokens(self) -> int:
        return int(self.token_index.numel())
