"""Host-side bookkeeping for generation: KV block allocation, sequences, and step batches.

Each sequence reserves, when admitted, every block it can ever need (prompt + max new tokens), so
running sequences never wait for memory and nothing is preempted; finished sequences give their
blocks back and waiting ones are admitted (continuous batching, nano-vllm style, without preemption).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
    slots: np.ndarray | None = None   # KV slot of every position the blocks cover (set with the blocks)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    def new_tokens(self) -> list[int]:
        """The tokens whose K/V are not cached yet (the prompt at prefill, the last token at decode)."""
        skip = self.num_cached - len(self.prompt)
        return self.output[skip:] if skip >= 0 else self.prompt[self.num_cached:] + self.output

    def assign_blocks(self, blocks: list[int], block_size: int) -> None:
        """Give the sequence its KV blocks (``[]`` takes them back) and cache its slot list."""
        self.blocks = blocks
        table = np.asarray(blocks, dtype=np.int64)
        self.slots = (table[:, None] * block_size + np.arange(block_size)).ravel() if blocks else None

    def blocks_needed(self, block_size: int) -> int:
        return -(-(len(self.prompt) + self.max_new_tokens) // block_size)


def build_step(seqs: list[Sequence], sliding_window: int | None = None) -> StepBatch:
    """The batch that feeds each sequence's uncached tokens (the prompt at prefill, the last token
    at decode) and attends to its context through its slot list (the last ``sliding_window``
    positions only, when the model has one, as HF masks them). Vectorised: one Python iteration per
    sequence, none per token; the slots come from :meth:`Sequence.assign_blocks`."""
    new_tokens = [seq.new_tokens() for seq in seqs]
    B = len(seqs)
    num_new = np.fromiter(map(len, new_tokens), np.int64, B)                   # [B]
    start = np.fromiter((seq.num_cached for seq in seqs), np.int64, B)         # [B]
    context = start + num_new                                                  # [B]
    S, L = int(num_new.max()), int(context.max())
    is_real = np.arange(S) < num_new[:, None]                                  # [B, S]
    input_ids = np.zeros((B, S), dtype=np.int64)
    input_ids[is_real] = np.concatenate(new_tokens)                            # row-major = token order
    positions = start[:, None] + np.arange(S)                                  # [B, S]
    read_slots = np.zeros((B, L), dtype=np.int64)                              # [B, L]
    for row, seq in enumerate(seqs):
        assert len(seq.slots) >= context[row], "a sequence's blocks cover its whole context"
        width = min(L, len(seq.slots))
        read_slots[row, :width] = seq.slots[:width]
    write_slots = np.take_along_axis(read_slots, np.minimum(positions, L - 1), 1)[is_real]   # [N]
    return StepBatch.pack(dict(input_ids=input_ids, positions=positions, context=context,
                               token_index=np.flatnonzero(is_real), write_slots=write_slots,
                               read_slots=read_slots, last_index=num_new - 1), sliding_window)
