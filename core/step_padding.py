"""A step's batch, padded to its graph bucket when device graphs are on (decode: rows; other steps: tokens)."""
from __future__ import annotations

from .rank.graphs import batch_bucket
from .rank.piecewise import token_bucket
from .sched.scheduler import Sequence, build_step


def padded_step(seqs: list[Sequence], num_new: list[int] | None, *, block_size: int, max_num_seqs: int,
                max_blocks_per_seq: int, uses_graphs: bool, token_buckets: list[int]):
    """The step batch in which sequence i feeds ``num_new[i]`` tokens from its ``num_cached`` on
    (default: all its uncached tokens); with ``uses_graphs``, a pure decode step is padded to its batch
    bucket of ``max_num_seqs`` rows and any other step to its bucket of ``token_buckets``."""
    num_prev = max_num_seqs
    if not uses_graphs:
        return build_step(seqs, num_new, block_size=block_size, num_prev=num_prev)
    decode = all(n == 1 for n in num_new) if num_new is not None else \
        all(s.num_tokens - s.num_cached == 1 for s in seqs)
    if decode:
        rows = batch_bucket(len(seqs), max_num_seqs)
        return build_step(seqs, num_new, max_blocks_per_seq, block_size=block_size, pad_to=rows,
                          num_prev=num_prev)
    tokens = sum(num_new) if num_new is not None else sum(s.num_tokens - s.num_cached for s in seqs)
    return build_step(seqs, num_new, max_blocks_per_seq, block_size=block_size, num_prev=num_prev,
                      pad_tokens_to=token_bucket(tokens, token_buckets))
