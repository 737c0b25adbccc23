"""KV block bookkeeping with prefix caching (vLLM v1's design).

A full block that has been computed is identified by a hash of its tokens chained with the hash of
the block before it, so equal hashes mean equal prefixes (the tokens are compared too on a hit, so a
hash collision can never hand out wrong K/V). A new sequence takes the cached blocks of its longest
cached prefix (reference counts let many sequences share them) and prefills only the rest.

A block whose reference count drops to zero goes to the free queue but keeps its hash and contents:
it is still a cache hit until it is handed out again. The free queue is least-recently-used first,
and a sequence's blocks are queued last block first, so a prefix outlives its own tails.
"""
from __future__ import annotations

from collections import OrderedDict

from ..errors import SchedulerError
from .sequence import Sequence


def chain_hash(parent: int | None, tokens: tuple[int, ...]) -> int:
    """The prefix-cache key of a full block: its tokens and its prefix's key (Python's tuple hash of
    ints is deterministic, not salted per process)."""
    return hash((parent, tokens))


class BlockManager:
    """KV blocks ``0..num_blocks-1``: a free queue (LRU first), reference counts and the prefix cache."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks          # key of the block's contents
        self._tokens: list[tuple[int, ...] | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}                             # key -> block id
        #: prefix-cache counters: prompt tokens looked up at admission, and how many were found
        self.queried_tokens = 0
        self.hit_tokens = 0

    # ---- counts ------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks that can be handed out (cached blocks no sequence holds included)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks some sequence holds."""
        return self.num_blocks - len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ---- prefix cache ------------------------------------------------------------------------
    def match_prefix(self, tokens: list[int]) -> list[int]:
        """The cached blocks holding the longest cached prefix of ``tokens``, full blocks only and
        never the whole sequence (its last token is always computed, for its logits)."""
        if not self.enable_prefix_caching:
            return []
        found, parent = [], None
        for start in range(0, len(tokens) - 1 - (self.block_size - 1), self.block_size):
            chunk = tuple(tokens[start:start + self.block_size])
            key = chain_hash(parent, chunk)
            block = self._cached.get(key)
            if block is None or self._tokens[block] != chunk:
                break
            found.append(block)
            parent = key
        return found

    # ---- allocation --------------------------------------------------------------------------
    def admit(self, seq: Sequence, budget: int, whole: bool = False) -> int:
        """Give a waiting ``seq`` its cached prefix (setting ``num_cached``) and blocks for the next
        tokens up to ``budget`` of them (all of them or none when ``whole``). Returns how many tokens
        to compute now; 0 (nothing changed) when they do not fit in the budget or the free blocks."""
        tokens = seq.tokens
        hits = [] if seq.computes_prompt_whole else self.match_prefix(tokens)
        hit_tokens = len(hits) * self.block_size
        pending = len(tokens) - hit_tokens
        count = min(pending, budget)
        if count < 1 or (whole and count < pending):
            return 0
        held = sum(1 for b in hits if self._ref[b] == 0)       # hits that sit in the free queue
        fresh = self.blocks_for(hit_tokens + count) - len(hits)
        if fresh + held > self.num_free:
            return 0
        for block in hits:
            self._take(block)
        seq.block_hashes = [self._hash[b] for b in hits]
        seq.assign_blocks(hits + [self._pop_free() for _ in range(fresh)], self.block_size)
        seq.num_cached = hit_tokens
        if seq.num_preemptions == 0:
            seq.num_prefix_hit = hit_tokens
            self.queried_tokens += len(seq.prompt)
            self.hit_tokens += hit_tokens
        return count

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Make ``seq``'s blocks cover ``num_tokens`` tokens; False (nothing changed) when they do not fit."""
        missing = self.blocks_for(num_tokens) - len(seq.blocks)
        if missing <= 0:
            return True
        if missing > self.num_free:
            return False
        seq.assign_blocks(seq.blocks + [self._pop_free() for _ in range(missing)], self.block_size)
        return True

    def commit(self, seq: Sequence) -> None:
        """Enter ``seq``'s newly computed full blocks into the prefix cache (after a step)."""
        if not self.enable_prefix_caching:
            return
        tokens = None
        known = min(seq.num_cached, seq.num_known)   # a pending token is not hashed before it is read back
        for index in range(len(seq.block_hashes), known // self.block_size):
            tokens = tokens or seq.tokens
            chunk = tuple(tokens[index * self.block_size:(index + 1) * self.block_size])
            key = chain_hash(seq.block_hashes[-1] if seq.block_hashes else None, chunk)
            seq.block_hashes.append(key)
            block = seq.blocks[index]
            if key not in self._cached and self._hash[block] is None:
                self._cached[key] = block
                self._hash[block], self._tokens[block] = key, chunk

    def free(self, seq: Sequence) -> None:
        """Give ``seq``'s blocks back (last block first, so prefixes are evicted last)."""
        for block in reversed(seq.blocks):
            if self._ref[block] <= 0:
                raise SchedulerError(f"block {block} freed more often than it was taken")
            self._ref[block] -= 1
            if self._ref[block] == 0:
                self._free[block] = None
                if self._hash[block] is None:
                    self._free.move_to_end(block, last=False)    # holds nothing reusable: hand out first
        seq.assign_blocks([], self.block_size)
        seq.block_hashes = []
        seq.num_cached = 0

    def _take(self, block: int) -> None:
        if self._ref[block] == 0:
            del self._free[block]
        self._ref[block] += 1

    def _pop_free(self) -> int:
        """The least recently used free block, its cached contents forgotten (evicted)."""
        block, _ = self._free.popitem(last=False)
        key = self._hash[block]
        if key is not None:
            del self._cached[key]
            self._hash[block] = self._tokens[block] = None
        self._ref[block] = 1
        return block

    def reset_prefix_cache(self) -> None:
        """Forget every cached block no sequence holds."""
        for block in list(self._free):
            key = self._hash[block]
            if key is not None:
                del self._cached[key]
                self._hash[block] = self._tokens[block] = None
