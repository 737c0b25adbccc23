"""Streams and events over their domain: an event recorded more than once (on one stream or on
several) tracks its last record, for queries and for waits; a stream waits for an event of another
device; an error queued on a stream before ``torch_stream()`` is entered is not lost.

Order is shown as in ``test_streams_events.py``: work behind long work (about 0.3 s of memsets) has
not run when the host looks right after enqueuing it.
"""
from __future__ import annotations

import numpy as np
import pytest

from anydev.conformance.long_work import LongWork, poll, read_back
from anydev.conformance.support import require_devices, require_torch_bridge, run_ranks
from anydev.conformance.test_collectives import close_all
from anydev.plugin_api import AnydevError


def test_an_event_recorded_again_tracks_its_last_record(device, stream, long_work):
    """Recorded on an idle stream, then again behind long work: ``query`` says running (the later
    record replaces the earlier), and a stream that waits on it waits for the long work."""
    idle, waiter = device.create_stream(), device.create_stream()
    copy = device.alloc(long_work.nbytes)
    event = device.create_event()
    try:
        idle.record(event)
        idle.synchronize()
        assert event.query() is True, "an event recorded on an idle, synchronized stream is not done"
        long_work.enqueue(stream, final_value=6)
        stream.record(event)
        assert event.query() is False, (
            "an event recorded again behind long work says done: its first record decided (a later record must "
            "replace the earlier one)")
        waiter.wait(event)
        waiter.memcpy_async(copy, long_work.buf)
        got = read_back(waiter, copy)
        assert bool(np.all(got == 6)), (
            f"a stream waiting on an event recorded again behind long work copied byte {int(got[0])}, expected 6 "
            "(it waited for the event's first record)")
    finally:
        stream.synchronize()
        event.close()
        copy.free()
        idle.close()
        waiter.close()


def test_an_event_recorded_again_on_an_idle_stream_is_done(device, stream, long_work):
    """Recorded behind long work, then again on an idle stream: once that stream has passed the
    record, the event is done although the long work may still run (the last record decides). A busy
    machine may let the long work finish first, which proves nothing either way: up to three tries."""
    idle = device.create_stream()
    event = device.create_event()
    seen = []
    try:
        for attempt in range(1, 4):
            long_work.enqueue(stream, final_value=2, repeats=attempt)
            stream.record(event)
            busy = stream.record()
            idle.record(event)
            poll(event.query, "an event recorded again on an idle stream")
            still_busy = busy.query() is False
            stream.synchronize()
            busy.close()
            seen.append(still_busy)
            if still_busy:
                break
        assert seen[-1], (
            f"in {len(seen)} tries an event recorded behind long work and then on an idle stream never said done "
            "before the long work ended: its first record decided")
    finally:
        stream.synchronize()
        event.close()
        idle.close()


def test_a_stream_waits_for_an_event_of_another_device(backend):
    """A stream of device 1 waiting on an event recorded behind long work on device 0: work enqueued
    on it after the wait has not run while device 0's work runs, and has once it ended."""
    require_devices(backend, 2)
    first, second = backend.device(0), backend.device(1)
    first.set_current()
    stream0 = first.create_stream()
    work = LongWork(first, stream0)
    second.set_current()
    stream1 = second.create_stream()
    try:
        first.set_current()
        work.enqueue(stream0, final_value=1)
        done = stream0.record()
        second.set_current()
        stream1.wait(done)
        after = stream1.record()
        assert after.query() is False, (
            "a stream of device 1 that waits on an event of device 0 recorded behind long work ran past the wait "
            "at once (stream_wait_event ignored across devices?)")
        after.synchronize()
        assert done.query() is True, "device 1's stream passed its wait before device 0's event completed"
        after.close()
        done.close()
    finally:
        first.set_current()
        stream0.synchronize()
        work.free()
        stream0.close()
        stream1.synchronize()
        stream1.close()
        first.set_current()


def test_an_error_queued_before_torch_stream_is_not_lost(backend):
    """A collective that fails on the stream (ranks disagree on its count), then ``torch_stream()``
    entered on that stream: the error is raised on entering (a host-memory backend synchronizes the
    stream there) or by the next synchronize after the block (a device backend's entry only switches
    torch's stream), never dropped. Host-memory backends only, as in ``test_collectives.py``."""
    if backend.torch_device_type != "cpu":
        pytest.skip("provoking a failure of queued work on a GPU needs a device fault, which ends the device context")
    require_torch_bridge(backend)
    require_devices(backend, 2)
    comms = backend.create_communicators([backend.device(0), backend.device(1)])

    def rank_body(rank: int) -> str:
        device = comms[rank].device
        device.set_current()
        stream = device.create_stream()
        count = 1031 + rank
        buf = device.alloc(count * 4)
        try:
            stream.memset_async(buf, 0)
            comms[rank].all_reduce(buf, op="sum", stream=stream, count=count, dtype="float32")
            try:
                with stream.torch_stream():
                    pass
            except AnydevError as exc:
                return f"at entry: {type(exc).__name__}"
            try:
                stream.synchronize()
            except AnydevError as exc:
                return f"at synchronize: {type(exc).__name__}"
            return ""
        finally:
            buf.free()
            stream.close()

    try:
        reported = run_ranks(2, rank_body, "a failing collective, then torch_stream()")
    finally:
        close_all(comms)
    for rank, where in enumerate(reported):
        assert where, (f"rank {rank}: a collective failed on the stream before torch_stream() was entered, and neither "
                       "entering nor the next synchronize raised: the queued error was lost")
