"""Streams and events: order within a stream, order across streams through events, non-blocking
queries of long work, elapsed time, and synchronisation.

"Long work" is a chain of memsets sized from the device's own memset speed (measured first) to take
about :data:`LONG_WORK_S` seconds, so that the check holds on a CPU thread and on a 4 TB/s GPU alike:
enqueuing it takes a tiny fraction of that, so a query right after enqueuing finds it still running.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from anydev.conformance.support import require_torch_bridge
from anydev.plugin_api import InvalidArgumentError

LONG_WORK_S = 0.3
MAX_CHAIN = 2000  # memsets; bounds the enqueue time
SMALL_CHUNK = 64 << 20  # first try; a CPU thread sets it in a few ms
BIG_CHUNK = 1 << 30  # on fast devices, so that each memset outlasts its enqueue by far


def read_back(stream, buf) -> np.ndarray:
    out = np.empty(buf.nbytes, dtype=np.uint8)
    stream.memcpy_async(out, buf)
    stream.synchronize()
    return out


class LongWork:
    """A buffer and a chain of memsets on it that takes about ``LONG_WORK_S`` on this device."""

    def __init__(self, device, stream):
        free = device.memory_info().free
        self.buf, one = self._calibrate(device, stream, max(1 << 20, min(SMALL_CHUNK, free // 8)))
        if one < 1e-3 and free // 8 > self.buf.nbytes:  # a fast device: use a bigger buffer
            self.buf.free()
            self.buf, one = self._calibrate(device, stream, min(BIG_CHUNK, free // 8))
        self.nbytes = self.buf.nbytes
        self.chain = int(min(MAX_CHAIN, max(8, LONG_WORK_S / one)))

    @staticmethod
    def _calibrate(device, stream, nbytes):
        """A buffer of ``nbytes`` and the seconds one memset of it takes (after a first, warming one)."""
        buf = device.alloc(nbytes)
        stream.memset_async(buf, 0)
        stream.synchronize()
        start = time.perf_counter()
        stream.memset_async(buf, 1)
        stream.synchronize()
        return buf, max(time.perf_counter() - start, 1e-6)

    def enqueue(self, stream, final_value: int) -> None:
        """The chain, ending with every byte of the buffer equal to ``final_value``."""
        for i in range(self.chain - 1):
            stream.memset_async(self.buf, i % 251)
        stream.memset_async(self.buf, final_value)

    def free(self) -> None:
        self.buf.free()


@pytest.fixture
def long_work(device, stream):
    work = LongWork(device, stream)
    yield work
    work.free()


def test_order_within_a_stream(device, stream):
    nbytes = 8 << 20
    a, b, c = device.alloc(nbytes), device.alloc(nbytes), device.alloc(nbytes)
    try:
        stream.memset_async(a, 1)
        stream.memcpy_async(b, a)  # must see 1
        stream.memset_async(a, 2)
        stream.memcpy_async(c, a)  # must see 2
        stream.memset_async(a, 3)
        assert bool(np.all(read_back(stream, b) == 1)), "a copy ran before the memset enqueued ahead of it"
        assert bool(np.all(read_back(stream, c) == 2)), "work on one stream ran out of order"
        assert bool(np.all(read_back(stream, a) == 3))
    finally:
        for buf in (a, b, c):
            buf.free()


def test_order_across_streams_through_an_event(device, stream, long_work):
    other = device.create_stream()
    copy = device.alloc(long_work.nbytes)
    try:
        long_work.enqueue(stream, final_value=7)
        with stream.record() as done:
            other.wait(done)
        other.memcpy_async(copy, long_work.buf)  # must wait for the whole chain on `stream`
        got = read_back(other, copy)
        assert bool(np.all(got == 7)), (
            f"the second stream copied before the event it waited on (saw byte {int(got[0])}, expected 7)"
        )
    finally:
        other.synchronize()
        stream.synchronize()
        copy.free()
        other.close()


def test_query_reports_running_then_done(stream, long_work):
    long_work.enqueue(stream, final_value=9)
    with stream.record() as event:
        assert event.query() is False, (
            f"event.query() said done right after enqueuing {long_work.chain} memsets of {long_work.nbytes} "
            f"bytes (~{LONG_WORK_S} s of work): the memsets ran synchronously, or query() waited for them"
        )
        event.synchronize()
        assert event.query() is True, "event.query() still says running after event.synchronize()"


def test_unrecorded_event_queries_done(device):
    event = device.create_event()
    try:
        assert event.query() is True, "an event never recorded must query as done"
    finally:
        event.close()


def test_stream_synchronize_waits(stream, long_work):
    long_work.enqueue(stream, final_value=13)
    with stream.record() as event:
        stream.synchronize()
        assert event.query() is True, "stream.synchronize() returned before the stream's work finished"
    out = np.empty(long_work.nbytes, dtype=np.uint8)
    stream.memcpy_async(out, long_work.buf)
    stream.synchronize()
    assert bool(np.all(out == 13))


def test_device_synchronize_waits_for_every_stream(device, stream, long_work):
    other = device.create_stream()
    second = LongWork(device, other)
    try:
        long_work.enqueue(stream, final_value=1)
        second.enqueue(other, final_value=2)
        events = [stream.record(), other.record()]
        device.synchronize()
        assert all(e.query() for e in events), "device.synchronize() returned before all streams finished"
        for event in events:
            event.close()
    finally:
        other.synchronize()
        second.free()
        other.close()


def test_elapsed_time_is_positive(device, stream, long_work):
    start, end = device.create_event(timing=True), device.create_event(timing=True)
    try:
        stream.record(start)
        long_work.enqueue(stream, final_value=5)
        stream.record(end)
        end.synchronize()
        elapsed = start.elapsed_ms(end)
        assert isinstance(elapsed, float), f"elapsed_ms returned {type(elapsed).__name__}"
        assert elapsed > 0.0, f"elapsed time over {long_work.chain} memsets is {elapsed} ms"
    finally:
        start.close()
        end.close()


def test_elapsed_time_needs_timing_events(device, stream):
    plain, timed = device.create_event(), device.create_event(timing=True)
    try:
        stream.record(plain)
        stream.record(timed)
        stream.synchronize()
        with pytest.raises(InvalidArgumentError):
            plain.elapsed_ms(timed)
    finally:
        plain.close()
        timed.close()


def test_torch_work_and_stream_work_stay_in_order(backend, device, stream, long_work):
    """Inside ``stream.torch_stream()``, torch kernels and our stream work run in the order issued:
    torch fills; we run a long memset chain and copy its zeros over the tensor; torch adds; torch
    copies out. The chain makes a backend that lets torch run ahead fail every time, not by chance."""
    require_torch_bridge(backend)
    n = min(long_work.nbytes, 16 << 20) // 4
    buf = device.alloc(n * 4)
    try:
        t = buf.as_tensor(torch.float32, (n,))
        out = torch.empty(n, dtype=torch.float32)
        with stream.torch_stream():
            t.fill_(1.0)
            long_work.enqueue(stream, final_value=0)
            stream.memcpy_async(buf, long_work.buf, n * 4)  # zeros, after the fill and the chain...
            t.add_(3.0)  # ...and before this add
            out.copy_(t)
        stream.synchronize()
        wrong = int(torch.count_nonzero(out != 3.0))
        assert wrong == 0, (
            f"{wrong} of {n} elements are not 3.0 (first: {out[int((out != 3.0).nonzero()[0])].item()}): "
            "torch and stream work ran out of order inside torch_stream()"
        )
    finally:
        buf.free()
