"""A first-fit free-list allocator over one region of memory: the "device memory" of a virtual device.

Only the bookkeeping is Python; the memory itself is one libc allocation (see ``libc.py``). Freed
blocks merge with free neighbours, so a long-running engine does not fragment the region.
"""
from __future__ import annotations

import bisect
import threading

ALIGNMENT = 256  # the contract promises 256-byte aligned device addresses


def _round_up(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class Arena:
    """Hands out aligned blocks of ``[base, base + size)``. Thread-safe."""

    def __init__(self, base: int, size: int):
        if base % ALIGNMENT or size % ALIGNMENT:
            raise ValueError(f"arena base {base:#x} and size {size} must be multiples of {ALIGNMENT}")
        self.base = base
        self.size = size
        self._free: list[tuple[int, int]] = [(0, size)]  # (offset, size), sorted by offset, merged
        self._used: dict[int, int] = {}  # offset -> size of each live block
        self._used_offsets: list[int] = []  # sorted keys of _used, to find the block holding an address
        self._lock = threading.Lock()

    def alloc(self, nbytes: int) -> int | None:
        """The address of a new block of at least ``nbytes`` (> 0), or None when nothing fits."""
        size = _round_up(nbytes)
        with self._lock:
            for i, (offset, free_size) in enumerate(self._free):
                if free_size >= size:
                    if free_size == size:
                        del self._free[i]
                    else:
                        self._free[i] = (offset + size, free_size - size)
                    self._used[offset] = size
                    bisect.insort(self._used_offsets, offset)
                    return self.base + offset
        return None

    def release(self, address: int) -> bool:
        """Return the block starting at ``address`` to the free list; False if it is not a live block."""
        offset = address - self.base
        with self._lock:
            size = self._used.pop(offset, None)
            if size is None:
                return False
            del self._used_offsets[bisect.bisect_left(self._used_offsets, offset)]
            i = bisect.bisect_left(self._free, (offset, 0))
            self._free.insert(i, (offset, size))
            self._merge_around(i)
            return True

    def _merge_around(self, i: int) -> None:
        if i + 1 < len(self._free) and self._free[i][0] + self._free[i][1] == self._free[i + 1][0]:
            self._free[i] = (self._free[i][0], self._free[i][1] + self._free.pop(i + 1)[1])
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == self._free[i][0]:
            self._free[i - 1] = (self._free[i - 1][0], self._free[i - 1][1] + self._free.pop(i)[1])

    def holds(self, address: int, nbytes: int) -> bool:
        """True when ``[address, address + nbytes)`` lies inside one live block."""
        offset = address - self.base
        with self._lock:
            i = bisect.bisect_right(self._used_offsets, offset) - 1
            if i < 0:
                return False
            start = self._used_offsets[i]
            return offset + nbytes <= start + self._used[start]

    def owns(self, address: int) -> bool:
        return self.base <= address < self.base + self.size

    def free_bytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._free)

    def largest_free_block(self) -> int:
        with self._lock:
            return max((size for _, size in self._free), default=0)
