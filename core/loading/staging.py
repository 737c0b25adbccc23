"""A rank's pinned staging memory for host→device copies: a few equal buffers used in turn, so the
host fills one while the device copies out of another."""
from __future__ import annotations

import numpy as np

from anydev.plugin_api import Device, HostBuffer, Stream


class PinnedStaging:
    """``count`` pinned host buffers of ``nbytes // count`` bytes each (``nbytes`` in all: the whole
    host memory a load holds, whatever the model's size).

        index, host = staging.acquire()      # waits until the copy out of this buffer has finished
        ... fill host.numpy() ...; stream.memcpy_async(dst, host, n)
        staging.release(index, stream)       # the buffer is free again once the stream gets here
    """

    def __init__(self, device: Device, nbytes: int, count: int = 2):
        if count < 1 or nbytes < count:
            raise ValueError(f"staging of {nbytes} bytes cannot make {count} buffers")
        self.device = device
        self.buffer_bytes = nbytes // count
        self.buffers: list[HostBuffer] = []
        self._arrays: list[np.ndarray] = []
        self._events = [None] * count
        self._next = 0
        try:
            for _ in range(count):
                self.buffers.append(device.alloc_host(self.buffer_bytes))
                self._arrays.append(self.buffers[-1].numpy())
        except BaseException:
            self.close()
            raise

    def acquire(self) -> tuple[int, HostBuffer, np.ndarray]:
        """The next buffer in turn (its index, the buffer and a uint8 view), once the device is done with it."""
        index = self._next
        if self._events[index] is not None:
            self._events[index].synchronize()
        return index, self.buffers[index], self._arrays[index]

    def release(self, index: int, stream: Stream) -> None:
        """The copies out of buffer ``index`` are on ``stream``; the buffer may be refilled after them."""
        if self._events[index] is None:
            self._events[index] = self.device.create_event()
        stream.record(self._events[index])
        self._next = (index + 1) % len(self._events)

    def close(self) -> None:
        """Wait for every copy out of the buffers, then free them."""
        try:
            for event in self._events:
                if event is not None:
                    event.synchronize()
        finally:
            for event in self._events:
                if event is not None:
                    event.close()
            self._arrays = []
            for buffer in self.buffers:
                buffer.close()
            self.buffers = []
            self._events = [None] * len(self._events)
