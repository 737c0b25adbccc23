"""``torch_stream`` for runtimes whose torch math runs on the host (their tensors are CPU tensors).

Torch CPU math queues on no stream: it runs at once on the calling thread. So such a runtime's
``torch_stream(stream)`` block synchronizes the stream on entry (the math sees earlier work's
results), and inside the block each call this thread enqueues on that stream finishes before it
returns (the next torch line may read its result). :class:`HostTorchStreams` opens those blocks and
says whether this thread is inside one; the cpu backend and the conformance suite's emulated runtimes
use it.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator


class HostTorchStreams:
    """The streams each thread has an open ``torch_stream`` block on."""

    def __init__(self):
        self._local = threading.local()   # .streams: this thread's open blocks, innermost last

    @contextlib.contextmanager
    def block(self, stream: int, synchronize: Callable[[], None]) -> Iterator[None]:
        """The ``torch_stream(stream)`` block: calls ``synchronize`` (the stream's) on entry, then
        counts this thread inside the block until it ends."""
        synchronize()
        open_streams = self._local.__dict__.setdefault("streams", [])
        open_streams.append(stream)
        try:
            yield
        finally:
            open_streams.pop()

    def inside(self, stream: int) -> bool:
        """Whether this thread is inside a block on ``stream``, so work it enqueues there must finish
        before the enqueuing call returns."""
        return stream in getattr(self._local, "streams", ())
