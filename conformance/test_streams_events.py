"""Streams and events: order within a stream, order across streams through events, non-blocking
queries of long work, overlap of independent streams, elapsed time against a known amount of work,
asynchronous copies from pinned memory, and synchronisation.

"Long work" (``long_work.py``) is a chain of memsets that takes about ``LONG_WORK_S`` on this
device; work enqueued behind it has not run yet when the host looks right after enqueuing.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from anydev.conformance.long_work import LONG_WORK_S, LongWork, poll, read_back
from anydev.conformance.support import require_torch_bridge
from anydev.plugin_api import InvalidArgumentError


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


def test_a_stream_waiting_on_an_event_finishes_after_it(device, stream, long_work):
    """stream_wait_event, checked by events rather than by data (a second, independent check): once
    a stream that waits on an event recorded behind long work has synchronized, that event is done."""
    other = device.create_stream()
    try:
        long_work.enqueue(stream, final_value=3)
        with stream.record() as done:
            other.wait(done)
            other.synchronize()
            assert done.query() is True, (
                "a stream that waits on an event finished while the event was still pending (stream_wait_event ignored?)"
            )
    finally:
        stream.synchronize()
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


def timed_run(device, stream, long_work, repeats: int) -> tuple[float, float, float]:
    """Elapsed seconds between two timing events around ``repeats`` chains of long work, and the
    bounds the host can prove for them by watching the events.

    The start event completes after its record was enqueued (``h0``) and before the host first sees
    it done (``h1``); the end event completes after the last time the host saw it not done (``h2``)
    and before the host sees it done (``h3``). So ``h2 - h1 <= elapsed <= h3 - h0`` whatever the
    machine's load: an order argument, not a timing threshold.
    """
    start, end = device.create_event(timing=True), device.create_event(timing=True)
    try:
        h0 = time.perf_counter()
        stream.record(start)
        long_work.enqueue(stream, final_value=5, repeats=repeats)
        stream.record(end)
        h1 = h2 = None
        deadline = time.monotonic() + 60 * repeats
        while True:
            if h1 is None and start.query():
                h1 = time.perf_counter()
            before = time.perf_counter()
            if end.query():
                h3 = time.perf_counter()
                break
            if h1 is not None:
                h2 = before
            assert time.monotonic() < deadline, "the timed work did not finish within a minute"
            time.sleep(0.001)
        if h1 is None:  # the start event was first seen done together with the end event
            h1 = h3
        elapsed = start.elapsed_ms(end)
        assert isinstance(elapsed, float), f"elapsed_ms returned {type(elapsed).__name__}"
        return elapsed / 1000.0, (h2 - h1 if h2 is not None else 0.0), h3 - h0
    finally:
        start.close()
        end.close()


def test_elapsed_time_matches_the_work(device, stream, long_work):
    """Elapsed time over one and over four chains of long work lies within what the host saw of each
    (see ``timed_run``); a constant, or a time not measured on the stream, cannot fit both."""
    slack = 2e-3  # event timestamp resolution and host/device clock reads (CUDA: ~1 us)
    results = {}
    for repeats in (1, 4):
        elapsed, low, high = timed_run(device, stream, long_work, repeats)
        results[repeats] = elapsed
        assert elapsed > 0.0, f"elapsed time over {repeats * long_work.chain} memsets is {elapsed * 1e3} ms"
        assert low - slack <= elapsed <= high * 1.01 + slack, (
            f"elapsed_ms over {repeats * long_work.chain} memsets says {elapsed * 1e3:.3f} ms, but the host saw "
            f"the work take between {low * 1e3:.3f} and {high * 1e3:.3f} ms"
        )
    assert results[4] > results[1], f"four times the work took {results[4] * 1e3:.3f} ms, once {results[1] * 1e3:.3f} ms"


def test_elapsed_time_covers_a_wait_on_another_stream(device, stream, long_work):
    """elapsed_ms by another route (a second, independent check): timing events on an idle second
    stream around its wait for long work on the first. The start completes before the host first
    sees it done (``h1``); the end completes after the host last saw the long work running (``h2``)
    and before it sees the end done (``h3``, with ``h0`` before the start was recorded). So
    ``h2 - h1 <= elapsed <= h3 - h0``, in milliseconds: a time in seconds is 1000 times too small."""
    slack = 2e-3
    other = device.create_stream()
    start, end = device.create_event(timing=True), device.create_event(timing=True)
    try:
        h0 = time.perf_counter()
        other.record(start)
        long_work.enqueue(stream, final_value=4)
        with stream.record() as work_done:
            other.wait(work_done)
            other.record(end)
            poll(start.query, "the start event on an idle stream")
            h1 = h2 = time.perf_counter()
            while True:
                before = time.perf_counter()
                if work_done.query():
                    break
                h2 = before
                time.sleep(0.001)
            end.synchronize()
            h3 = time.perf_counter()
        elapsed = start.elapsed_ms(end) / 1000.0
        assert h2 - h1 - slack <= elapsed <= h3 - h0 + slack, (
            f"elapsed_ms around a wait for long work says {elapsed * 1e3:.3f} ms, but the host saw the wait take "
            f"between {(h2 - h1) * 1e3:.3f} and {(h3 - h0) * 1e3:.3f} ms (a time in seconds, not milliseconds?)"
        )
    finally:
        stream.synchronize()
        other.synchronize()
        start.close()
        end.close()
        other.close()


def test_independent_streams_overlap(device, stream, long_work):
    """A second stream is not held up by a first one's long work: a small memset enqueued on it after
    the chain completes while the chain is still running. A backend that runs every stream on one
    queue can never show that state; a busy machine may hide it once, so up to three tries."""
    other = device.create_stream()
    small = device.alloc(4096)
    seen = []
    try:
        for attempt in range(1, 4):
            long_work.enqueue(stream, final_value=1, repeats=attempt)
            busy = stream.record()
            other.memset_async(small, 3)
            quick = other.record()
            poll(quick.query, "a memset on an idle stream")
            still_busy = busy.query() is False
            stream.synchronize()
            busy.close()
            quick.close()
            seen.append(still_busy)
            if still_busy:
                break
        assert seen[-1], (
            f"in {len(seen)} tries, a memset on a second stream never finished before the long work enqueued "
            "earlier on the first stream: independent streams do not overlap (one queue for all of them?)"
        )
    finally:
        other.synchronize()
        small.free()
        other.close()


def test_copies_from_pinned_memory_are_asynchronous(device, stream, long_work):
    """Copies to and from pinned host memory (``alloc_host``) run when the stream reaches them:
    ``memcpy_async`` returns at once, a host-to-device copy reads the pinned bytes as they are then
    (the host changes them after enqueuing), and a device-to-host copy writes them only then."""
    nbytes = 1 << 20
    pinned_in, pinned_out = device.alloc_host(nbytes), device.alloc_host(nbytes)
    dst = device.alloc(nbytes)
    try:
        pinned_in.numpy()[:] = 1
        pinned_out.numpy()[:] = 0
        stream.memset_async(dst, 0)
        long_work.enqueue(stream, final_value=0)
        stream.memcpy_async(dst, pinned_in)  # H2D: must read the 2s written below
        stream.memset_async(long_work.buf, 9, nbytes)
        stream.memcpy_async(pinned_out, long_work.buf, nbytes)  # D2H: 9s, written only when reached
        copied = stream.record()
        assert copied.query() is False, (
            "memcpy_async from and to pinned memory waited for the stream's earlier work (synchronous copies)"
        )
        assert bool(np.all(pinned_out.numpy() == 0)), "the device-to-host copy wrote pinned memory before the stream reached it"
        pinned_in.numpy()[:] = 2  # before the stream reaches the copy
        got = read_back(stream, dst)
        copied.close()
        assert bool(np.all(got == 2)), (
            f"the host-to-device copy read the pinned bytes when it was enqueued (saw {int(got[0])}, expected 2): "
            "alloc_host memory is not pinned (staged as pageable memory), or the copy ran synchronously"
        )
        assert bool(np.all(pinned_out.numpy() == 9)), "the device-to-host copy into pinned memory did not land"
    finally:
        stream.synchronize()
        dst.free()
        pinned_in.free()
        pinned_out.free()


@pytest.mark.contract_shape
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
