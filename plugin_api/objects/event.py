"""Event: a marker in a stream, to query, wait on, and time between."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ClosedError, InvalidArgumentError
from .closable import Closable

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream


class Event(Closable):
    """A marker in a stream: query it, wait on it, time between two."""

    def __init__(self, device: Device, handle: int, timing: bool):
        self.device = device
        self.runtime = device.runtime
        self.handle = handle
        self.timing = timing
        self._what = f"event on {device}"
        self._record = self.runtime.event_record
        self._closed = False  # on the instance: the hot paths read it, and that lookup is cheaper

    def record(self, stream: Stream) -> None:
        """Record this event at ``stream``'s tail (a hot path: kept to one test and one call)."""
        if self._closed or stream._closed:
            raise ClosedError(self._what if self._closed else stream._what)
        self._record(self.handle, stream.handle)

    def query(self) -> bool:
        """True once the recorded work has finished; never blocks."""
        self._check_open()
        return self.runtime.event_query(self.handle)

    def synchronize(self) -> None:
        self._check_open()
        self.runtime.event_synchronize(self.handle)

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end``; both timing-enabled and completed."""
        self._check_open()
        end._check_open()
        if not (self.timing and end.timing):
            raise InvalidArgumentError("elapsed_ms needs two events created with timing=True")
        return self.runtime.event_elapsed_ms(self.handle, end.handle)

    def _release(self) -> None:
        self.runtime.event_destroy(self.handle)
