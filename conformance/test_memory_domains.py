"""Memory over its domain: memset at every offset, length and byte value; copies of every kind at
every source and destination offset and length; allocations of any size made and freed in any order.

Each check writes a guard pattern around the range first, so a call that writes one byte too many, or
one too few, or at the wrong place, fails: every byte of the buffer is compared with what the
contract promises. The edges are explicit examples (0 bytes, 1 byte, the last byte, the whole
buffer); hypothesis picks the rest from a fixed seed (``domains.py``).
"""
from __future__ import annotations

import numpy as np

from anydev.conformance.domains import bounded, example, given, st
from anydev.conformance.long_work import read_back
from anydev.plugin_api import CopyKind

SPAN = 12_289  # bytes per buffer: 3 pages and one byte, so ranges cross page boundaries and end ragged
ALIGNMENT = 256


def pattern(seed: int, nbytes: int = SPAN) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def first_difference(got: np.ndarray, want: np.ndarray) -> str:
    wrong = np.flatnonzero(got != want)
    return f"{wrong.size} wrong bytes, the first at {int(wrong[0])} (got {int(got[wrong[0]])}, expected {int(want[wrong[0]])})"


ranges = st.integers(0, SPAN).flatmap(lambda offset: st.tuples(st.just(offset), st.integers(0, SPAN - offset)))


@bounded(30)
@given(span=ranges, value=st.integers(0, 255))
@example(span=(0, 0), value=0x5C).via("nothing at the start")
@example(span=(SPAN, 0), value=0x5C).via("nothing at the end")
@example(span=(SPAN - 1, 1), value=0xFF).via("the last byte")
@example(span=(0, SPAN), value=0x80).via("the whole buffer")
@example(span=(1, SPAN - 2), value=0x01).via("all but the first and last byte")
@example(span=(4097, 4097), value=0x7F).via("unaligned start, ragged end")
def test_memset_writes_exactly_its_range(device, stream, span, value):
    """memset_async(offset, nbytes, value) sets those bytes to ``value`` and no other byte."""
    offset, nbytes = span
    guard = pattern(offset * 31 + nbytes)
    buf = device.alloc(SPAN)
    try:
        stream.memcpy_async(buf, guard)
        stream.memset_async(buf, value, nbytes, offset=offset)
        got = read_back(stream, buf)
    finally:
        buf.free()
    want = guard.copy()
    want[offset:offset + nbytes] = value
    assert np.array_equal(got, want), f"memset of {nbytes} bytes at offset {offset} to {value:#04x}: {first_difference(got, want)}"


KINDS = ("host_to_device", "device_to_host", "device_to_device", "host_to_host")
copies = st.tuples(st.integers(0, SPAN), st.integers(0, SPAN)).flatmap(
    lambda ends: st.tuples(st.just(ends[0]), st.just(ends[1]), st.integers(0, SPAN - max(ends))))


@bounded(40)
@given(kind=st.sampled_from(KINDS), copy=copies, pinned=st.booleans())
@example(kind="device_to_device", copy=(0, 0, SPAN), pinned=False).via("a whole buffer")
@example(kind="device_to_device", copy=(4097, 3, 1), pinned=False).via("one byte between offsets")
@example(kind="device_to_device", copy=(1, 0, SPAN - 1), pinned=False).via("all but the first byte, shifted")
@example(kind="host_to_device", copy=(SPAN - 1, 0, 1), pinned=True).via("from pinned memory, the last byte")
@example(kind="device_to_host", copy=(0, SPAN - 1, 1), pinned=True).via("into pinned memory, the last byte")
@example(kind="device_to_host", copy=(5, 7, 0), pinned=False).via("nothing")
def test_memcpy_of_every_kind_writes_exactly_its_range(device, stream, kind, copy, pinned):
    """memcpy_async of ``nbytes`` from ``src + src_offset`` to ``dst + dst_offset``, for every
    CopyKind (host memory pageable or pinned): those bytes arrive, and no other byte of the
    destination changes."""
    src_offset, dst_offset, nbytes = copy
    source, before = pattern(1 + src_offset), pattern(2 + dst_offset + nbytes)
    src_on_device, dst_on_device = kind.startswith("device"), kind.endswith("to_device")
    owned = []

    def memory(on_device: bool, data: np.ndarray):
        if on_device:
            buf = device.alloc(SPAN)
            stream.memcpy_async(buf, data)
        elif pinned:
            buf = device.alloc_host(SPAN)
            buf.numpy()[:] = data
        else:
            return data.copy()
        owned.append(buf)
        return buf

    try:
        src, dst = memory(src_on_device, source), memory(dst_on_device, before)
        stream.memcpy_async(dst, src, nbytes, dst_offset=dst_offset, src_offset=src_offset)
        if dst_on_device:
            got = read_back(stream, dst)
        else:
            stream.synchronize()
            got = (dst.numpy() if hasattr(dst, "numpy") else dst).copy()
    finally:
        stream.synchronize()
        for buf in owned:
            buf.free()
    want = before.copy()
    want[dst_offset:dst_offset + nbytes] = source[src_offset:src_offset + nbytes]
    expected_kind = CopyKind[kind.upper()]
    assert np.array_equal(got, want), (
        f"{expected_kind.name} copy of {nbytes} bytes from offset {src_offset} to offset {dst_offset}"
        f"{' (pinned host memory)' if pinned else ''}: {first_difference(got, want)}")


sizes = st.sampled_from([0, 1, 255, 256, 257, 4095, 4096, 65_537, 1 << 20]) | st.integers(0, 300_000)
operations = st.lists(st.tuples(st.booleans(), sizes, st.integers(0, 1 << 30)), min_size=1, max_size=24)


@bounded(12)
@given(ops=operations)
def test_allocations_of_any_size_freed_in_any_order_keep_their_contents(device, stream, ops):
    """A sequence of allocations (0 bytes to 1 MiB) and frees of live buffers in any order: every
    live buffer is aligned to 256 bytes, overlaps no other, and keeps the bytes written into it
    whatever was allocated or freed since."""
    live: dict[int, tuple[object, int]] = {}  # id -> (buffer, its byte)
    try:
        for step, (allocate, nbytes, pick) in enumerate(ops):
            if allocate or not live:
                buf = device.alloc(nbytes)
                assert buf.ptr % ALIGNMENT == 0, f"a {nbytes}-byte allocation at {buf.ptr:#x} is not {ALIGNMENT}-aligned"
                byte = (step * 37 + 11) % 256
                if nbytes:
                    stream.memset_async(buf, byte)
                live[step] = (buf, byte)
            else:
                key = sorted(live)[pick % len(live)]
                live.pop(key)[0].free()
            spans = sorted((b.ptr, b.ptr + b.nbytes) for b, _ in live.values() if b.nbytes)
            overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if a[1] > b[0]]
            assert not overlaps, f"after step {step} of {ops}: live allocations overlap: {overlaps}"
        for buf, byte in live.values():
            if buf.nbytes:
                got = read_back(stream, buf)
                assert bool(np.all(got == byte)), (
                    f"a live {buf.nbytes}-byte buffer lost its contents after {ops}: {first_difference(got, np.full_like(got, byte))}")
    finally:
        for buf, _ in live.values():
            buf.free()


def test_free_host_waits_for_the_copy_queued_into_it(device, stream, long_work):
    """``free_host`` of a pinned buffer that a queued device-to-host copy writes returns only once
    that copy has landed: memory given back earlier is written after it belongs to someone else."""
    nbytes = 1 << 20
    src = device.alloc(nbytes)
    pinned = device.alloc_host(nbytes)
    landed = None
    try:
        stream.memset_async(src, 0x3C)
        long_work.enqueue(stream, final_value=0)
        stream.memcpy_async(pinned, src, nbytes)        # behind the long work: still queued
        landed = stream.record()
        assert landed.query() is False, "the copy landed at once: the long work did not hold the stream"
        pinned.free()
        assert landed.query() is True, "free_host returned while a copy into the buffer was still queued"
    finally:
        stream.synchronize()
        if landed is not None:
            landed.close()
        src.free()
