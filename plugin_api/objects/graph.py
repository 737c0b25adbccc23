"""Graph: torch work on one stream, captured once and replayed (contract 1.1, optional)."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError
from ..runtime import TorchGraph
from .closable import Closable

if TYPE_CHECKING:
    from .stream import Stream


class Graph(Closable):
    """Torch work on one stream, captured once, replayed many times (see
    :class:`~anydev.plugin_api.runtime.TorchGraph` for the rules). From ``stream.create_graph()``::

        with graph.capture():
            out = model(static_input)      # recorded, not run
        static_input.copy_(new_input)
        graph.replay()                     # runs it; ``out`` holds the result
    """

    def __init__(self, stream: Stream, graph: TorchGraph):
        self.stream = stream
        self.device = stream.device
        self._graph = graph
        self._captured = False
        self._capture_started = False
        self._what = f"device graph on {stream._what}"

    @property
    def captured(self) -> bool:
        return self._captured

    @contextlib.contextmanager
    def capture(self, share_memory_with: "Graph | None" = None):
        """Record the torch work this thread enqueues on the stream inside the ``with`` block.
        ``share_memory_with``: a captured graph of the same device whose memory pool to reuse (the
        two must never replay at the same time)."""
        self._check_open()
        self.stream._check_open()
        if self._capture_started:
            raise InvalidArgumentError(f"{self._what} was already captured; create a new graph to record again")
        shared = None
        if share_memory_with is not None:
            share_memory_with._check_open()
            if share_memory_with.device is not self.device or not share_memory_with.captured:
                raise InvalidArgumentError("share_memory_with must be a captured graph of the same device")
            shared = share_memory_with._graph
        self._capture_started = True
        self.stream._capturing = True   # no event records inside a capture (see Stream._hold)
        try:
            with self._graph.capture(shared):
                yield self
        finally:
            self.stream._capturing = False
        self._captured = True

    def replay(self) -> None:
        """Enqueue the recorded work on the stream."""
        self._check_open()
        self.stream._check_open()
        if not self._captured:
            raise InvalidArgumentError(f"{self._what} has no capture to replay; capture() it first")
        self._graph.replay()

    def _release(self) -> None:
        self._graph.close()
