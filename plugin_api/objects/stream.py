"""Stream: an in-order queue of memsets, copies, event records and waits on one device."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ..errors import AnydevError, InvalidArgumentError
from ..types import CopyKind
from .closable import Closable
from .graph import Graph
from .memory import DeviceBuffer, HostBuffer, host_span

if TYPE_CHECKING:
    from .device import Device
    from .event import Event


class Stream(Closable):
    """An in-order queue of work on one device. Use one stream from one thread at a time."""

    #: Host objects that queued work uses are fenced by an event once this many have gathered.
    FENCE_EVERY = 16

    def __init__(self, device: Device, handle: int):
        self.device = device
        self.runtime = device.runtime
        self.handle = handle
        self._what = f"stream on {device}"
        self._keepalive: list = []                    # held since the last fence
        self._fenced: deque[tuple[Event, list]] = deque()  # (event after their work, held objects)
        self._spare_events: list[Event] = []
        self._capturing = False                       # set by Graph.capture: no event records then
        self._memset = self.runtime.memset_async
        self._closed = False  # on the instance: the hot paths read it, and that lookup is cheaper

    def memset_async(self, dst: DeviceBuffer, value: int, nbytes: int | None = None, offset: int = 0) -> None:
        """Enqueue: set ``nbytes`` (default: the rest of ``dst``) bytes from ``offset`` to byte ``value``."""
        # A hot path (benchmarked against the bare runtime call): one combined test, details on failure.
        if self._closed or dst.__class__ is not DeviceBuffer or dst._closed or dst.device is not self.device:
            self._memset_error(dst, value, nbytes, offset)
        if nbytes is None:
            nbytes = dst.nbytes - offset
        if not 0 <= value <= 255 or offset < 0 or nbytes < 0 or offset + nbytes > dst.nbytes:
            self._memset_error(dst, value, nbytes, offset)
        self._memset(dst.ptr + offset, value, nbytes, self.handle)

    def _memset_error(self, dst, value, nbytes, offset):
        """Raise the typed error that explains why ``memset_async`` refused its arguments."""
        self._check_open()
        if not isinstance(dst, DeviceBuffer):
            raise InvalidArgumentError(f"memset_async needs a DeviceBuffer, got {type(dst).__name__}")
        if dst.device is not self.device:
            raise InvalidArgumentError(f"buffer on {dst.device} used with a stream on {self.device}")
        if not 0 <= value <= 255:
            raise InvalidArgumentError(f"memset value must be a byte (0..255), got {value}")
        dst.address(offset, dst.nbytes - offset if nbytes is None else nbytes)  # raises ClosedError or range error

    def memcpy_async(self, dst, src, nbytes: int | None = None, dst_offset: int = 0, src_offset: int = 0) -> None:
        """Enqueue a copy; the direction follows from the arguments.

        ``dst``/``src`` are DeviceBuffers or host memory (HostBuffer, numpy array, CPU tensor,
        bytes-like). Pageable host memory is kept alive by the stream until its next ``synchronize()``
        but must not be changed before the copy has run.
        """
        self._check_open()
        dst_dev, src_dev = isinstance(dst, DeviceBuffer), isinstance(src, DeviceBuffer)
        if dst_dev:
            dst_ptr, dst_size = dst.address(), dst.nbytes
        else:
            dst_ptr, dst_size = host_span(dst, writable=True)
        if src_dev:
            src_ptr, src_size = src.address(), src.nbytes
        else:
            src_ptr, src_size = host_span(src, writable=False)
        if nbytes is None:
            nbytes = min(dst_size - dst_offset, src_size - src_offset)
        if dst_offset < 0 or src_offset < 0 or nbytes < 0 or dst_offset + nbytes > dst_size or src_offset + nbytes > src_size:
            raise InvalidArgumentError(
                f"copy of {nbytes} bytes (dst offset {dst_offset}, src offset {src_offset}) does not fit "
                f"a {dst_size}-byte destination and a {src_size}-byte source"
            )
        kind = {(False, False): CopyKind.HOST_TO_HOST, (False, True): CopyKind.HOST_TO_DEVICE,
                (True, False): CopyKind.DEVICE_TO_HOST, (True, True): CopyKind.DEVICE_TO_DEVICE}[(src_dev, dst_dev)]
        self._hold([obj for obj in (dst, src) if not isinstance(obj, (DeviceBuffer, HostBuffer))])
        self.runtime.memcpy_async(dst_ptr + dst_offset, src_ptr + src_offset, nbytes, kind, self.handle)

    def record(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new untimed one if None) at the stream's tail and return it."""
        self._check_open()
        event = event or self.device.create_event()
        event.record(self)
        return event

    def wait(self, event: "Event") -> None:
        """Make later work on this stream wait for ``event``."""
        self._check_open()
        event._check_open()
        self.runtime.stream_wait_event(self.handle, event.handle)

    def synchronize(self) -> None:
        """Block until all work enqueued so far has finished."""
        self._check_open()
        self.runtime.stream_synchronize(self.handle)
        self._drop_held(everything=True)

    def _hold(self, objects: list) -> None:
        """Keep ``objects`` (host memory or tensors that enqueued work reads or writes) alive until
        that work has run, without a host sync: every ``FENCE_EVERY`` objects an event recorded at
        the tail closes a batch, and batches whose event has completed are dropped then (a
        non-blocking query of the oldest). ``synchronize()`` drops everything."""
        self._keepalive.extend(objects)
        if len(self._keepalive) >= self.FENCE_EVERY and not self._capturing:
            self._drop_held(everything=False)
            event = self._spare_events.pop() if self._spare_events else self.device.create_event()
            event.record(self)
            self._fenced.append((event, self._keepalive))
            self._keepalive = []

    def _drop_held(self, everything: bool) -> None:
        """Release the batches whose work has run (all of them after a sync). A fence of failed
        work stays held: the error is the next ``synchronize()``'s to report, not an enqueue's."""
        while self._fenced and (everything or self._fence_passed(self._fenced[0][0])):
            self._spare_events.append(self._fenced.popleft()[0])
        if everything:
            self._keepalive = []

    @staticmethod
    def _fence_passed(event: "Event") -> bool:
        try:
            return event.query()
        except AnydevError:   # the stream failed; synchronize() raises it
            return False

    def torch_stream(self):
        """Context manager: torch kernels inside it run on this stream."""
        self._check_open()
        return self.runtime.torch_stream(self.handle, self.device.index)

    def create_graph(self) -> "Graph":
        """A device graph recording torch work on this stream (optional call ``torch_graph``,
        contract 1.1; ``backend.supports("torch_graph")`` tells). Raises ``NotSupportedError`` where
        the backend has no device graphs."""
        self._check_open()
        return Graph(self, self.runtime.torch_graph(self.handle, self.device.index))

    def _release(self) -> None:
        try:
            for event in self._spare_events + [event for event, _ in self._fenced]:
                event.close()
        finally:
            self.runtime.stream_destroy(self.handle)
            self._fenced.clear()
            self._spare_events, self._keepalive = [], []
