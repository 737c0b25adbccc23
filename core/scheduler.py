"""Host-side bookkeeping for generation: KV block allocation, sequences, and step batches.

Each sequence reserves, when admitted, every block it can ever need (prompt + max new tokens), so
running sequences never wait for memory and nothing is preempted; finished sequences give their
blocks back and waiting ones are admitted (continuous batching, nano-vllm style, without preemption).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .models.batch import StepBatch


class BlockAllocator:
    """A free list of KV block ids ``0..num_blocks-1``."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        assert count <= len(self._free), "caller checks num_free first"
        return [self._free.pop() for _ in range(count)]

    def release(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))


@dataclass
class Sequence:
    index: int                  # position in the caller's prompt list
    prompt: list[int]
    max_new_tokens: int         # already capped by the context length
    output: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    num_cached: int = 0         # tokens whose K/V are in the cache
    finish_reason: str | None = None

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def blocks_needed(self, block_size: int) -> int:
        return -(-(len(self.prompt) + self.max_new_tokens) // block_size)


def build_step(seqs: list[Sequence], block_size: int, sliding_window: int | None = None) -> StepBatch:
    """The batch that feeds each sequence's uncached tokens (the prompt at prefill, the last token
    at decode) and attends to its context through its block table (the last ``sliding_window``
    positions only, when the model has one, as HF masks them)."""
    new_tokens = [seq.tokens[seq.num_cached:] for seq in seqs]
    num_new = torch.tensor([len(t) for t in new_tokens])                       # [B]
    start = torch.tensor([seq.num_cached for seq in seqs])                     # [B]
    context = start + num_new                                                  # [B]
    S, L = int(num_new.max()), int(context.max())
    width = -(-L // block_size)
    tables = torch.tensor([seq.blocks[:width] + [0] * (width - len(seq.blocks[:width])) for seq in seqs])  # [B, W]

    input_ids = torch.tensor([t + [0] * (S - len(t)) for t in new_tokens])    # [B, S]
    positions = start[:, None] + torch.arange(S)                               # [B, S]
    is_real = torch.arange(S) < num_new[:, None]                               # [B, S]
    token_index = is_real.flatten().nonzero().squeeze(1)                       # [N]
    write_slots = _slots(tables, positions.clamp(max=L - 1), block_size).flatten()[token_index]
    keys = torch.arange(L)
    read_slots = _slots(tables, keys.expand(len(seqs), L), block_size)         # [B, L]
    mask = (keys <= positions[:, :, None]) & (keys < context[:, None, None])   # [B, S, L]
    if sliding_window:
        mask &= keys > positions[:, :, None] - sliding_window
    return StepBatch(input_ids, positions, token_index, write_slots, read_slots, mask[:, None], num_new - 1)


def _slots(tables: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """KV slot of each position [B, X] given block tables [B, W]."""
    return tables.gather(1, positions // block_size) * block_size + positions % block_size
