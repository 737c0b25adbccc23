"""Mutants of streams, events and devices: queries, timing, waits, queues, errors, the current device."""
from __future__ import annotations

import threading
import types

from anydev.backends.cpu.runtime import CpuRuntime
from anydev.backends.cpu.streams import StreamWorker

from . import mutant


@mutant("event-query-always-done", checks=["test_streams_events.py"])
class EventQueryAlwaysDone(CpuRuntime):
    """event_query says done whatever the stream's progress."""

    def event_query(self, event):
        self._event("event_query", event)
        return True


@mutant("elapsed-time-constant", checks=["test_streams_events.py"])
class ElapsedTimeConstant(CpuRuntime):
    """event_elapsed_ms checks its events and returns a constant 1 ms."""

    def event_elapsed_ms(self, start, end):
        super().event_elapsed_ms(start, end)
        return 1.0


@mutant("elapsed-time-in-seconds", checks=["test_streams_events.py"])
class ElapsedTimeInSeconds(CpuRuntime):
    """event_elapsed_ms returns the time in seconds, not milliseconds."""

    def event_elapsed_ms(self, start, end):
        return super().event_elapsed_ms(start, end) / 1000.0


@mutant("wait-event-ignored", checks=["test_streams_events.py"])
class WaitEventIgnored(CpuRuntime):
    """stream_wait_event checks its handles and does not make the stream wait."""

    def stream_wait_event(self, stream, event):
        self._stream("stream_wait_event", stream)
        self._event("stream_wait_event", event)


@mutant("streams-one-queue", checks=["test_streams_events.py"])
class StreamsShareOneQueue(CpuRuntime):
    """Every stream of a device runs on one queue, so independent streams never overlap."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._queues: dict[int, StreamWorker] = {}
        self._queues_lock = threading.Lock()

    def stream_create(self):
        device = self._current_device()
        handle = self._new_handle()
        with self._queues_lock:
            if device not in self._queues:
                self._queues[device] = StreamWorker(handle, device)
            self._streams[handle] = self._queues[device]
        return handle

    def stream_destroy(self, stream):
        worker = self._stream("stream_destroy", stream)
        with self._queues_lock:
            self._streams.pop(stream, None)
            if worker in self._streams.values():
                return
            self._queues.pop(worker.device, None)
        unreported = worker.stop()
        if unreported is not None:
            raise unreported

    def _workers_on(self, device):
        return list({id(w): w for w in super()._workers_on(device)}.values())


class _SwallowingWorker(StreamWorker):
    def _execute(self, call, operation):
        try:
            operation()
        except Exception:  # the fault: the error of queued work is dropped
            pass


@mutant("errors-swallowed", checks=["test_collectives.py::test_errors_of_queued_collectives_are_reported_at_synchronize"])
class QueuedErrorsSwallowed(CpuRuntime):
    """An error raised by queued work is dropped instead of being reported at the next synchronize."""

    def stream_create(self):
        device = self._current_device()
        handle = self._new_handle()
        self._streams[handle] = _SwallowingWorker(handle, device)
        return handle


@mutant("current-device-global", checks=["test_devices.py"])
class CurrentDeviceIsGlobal(CpuRuntime):
    """The current device is one per process, not one per thread."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._current = types.SimpleNamespace()
