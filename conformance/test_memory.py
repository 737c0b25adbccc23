"""Memory: allocation sizes and alignment, memset and memcpy of every kind, free waiting for queued
work, torch views at offsets, and the typed errors."""
from __future__ import annotations

import numpy as np
import pytest

from anydev.conformance.long_work import read_back
from anydev.conformance.support import require_torch_bridge
from anydev.plugin_api import ClosedError, InvalidArgumentError, OutOfMemoryError

ALIGNMENT = 256
LARGE = 256 << 20  # "large" allocation, capped at a quarter of the device's free memory


def random_bytes(nbytes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def large_size(device) -> int:
    return min(LARGE, device.memory_info().free // 4) | 1  # odd, to also cover a ragged tail


@pytest.mark.parametrize("size_name", ["0", "1", "odd", "large"])
def test_alloc_sizes(device, stream, size_name):
    nbytes = {"0": 0, "1": 1, "odd": 1_000_003, "large": None}[size_name]
    nbytes = large_size(device) if nbytes is None else nbytes
    buf = device.alloc(nbytes)
    try:
        assert buf.nbytes == nbytes
        assert buf.ptr % ALIGNMENT == 0, f"address {buf.ptr:#x} of a {nbytes}-byte buffer is not {ALIGNMENT}-aligned"
        stream.memset_async(buf, 0x5C)  # not 0xA5, the cpu backend's byte for uninitialised memory
        got = read_back(stream, buf)
        assert got.size == nbytes and bool(np.all(got == 0x5C)), (
            f"memset of the whole buffer did not read back: first wrong byte at {int(np.argmax(got != 0x5C))} of {nbytes}"
        )
    finally:
        buf.free()


def test_alloc_most_of_the_device(device, stream):
    """Three quarters of the free memory in one buffer (the KV-cache use): its far end is writable,
    and freeing it gives the memory back."""
    free_before = device.memory_info().free
    nbytes = (free_before * 3 // 4) & ~((1 << 20) - 1)
    if nbytes < 1 << 20:
        pytest.skip(f"only {free_before} bytes free on {device}")
    buf = device.alloc(nbytes)
    try:
        assert device.memory_info().free <= free_before - nbytes + (free_before >> 4), "memory_info ignores the allocation"
        stream.memset_async(buf, 0x5A, 1 << 20, offset=nbytes - (1 << 20))
        assert bool(np.all(read_back(stream, buf, 4096, offset=nbytes - 4096) == 0x5A))
    finally:
        buf.free()
    assert device.memory_info().free >= free_before - (free_before >> 4), "freeing did not give the memory back"


def test_alignment_of_many_allocations(device):
    buffers = [device.alloc(size) for size in (1, 3, 255, 257, 4095, 65_537, 1 << 20)]
    try:
        misaligned = [(b.nbytes, hex(b.ptr)) for b in buffers if b.ptr % ALIGNMENT]
        assert not misaligned, f"allocations not {ALIGNMENT}-aligned (size, address): {misaligned}"
        addresses = [b.ptr for b in buffers]
        assert len(set(addresses)) == len(addresses), "two live allocations share an address"
    finally:
        for b in buffers:
            b.free()


def test_memset_pattern_and_sub_range(device, stream):
    nbytes = 3 * 65_536 + 7
    buf = device.alloc(nbytes)
    try:
        stream.memset_async(buf, 0x11)
        stream.memset_async(buf, 0xEE, 1000, offset=65_537)  # a ragged range in the middle
        got = read_back(stream, buf)
        expected = np.full(nbytes, 0x11, dtype=np.uint8)
        expected[65_537:66_537] = 0xEE
        assert np.array_equal(got, expected), f"first wrong byte at {int(np.argmax(got != expected))}"
    finally:
        buf.free()


HOST_KINDS = ["numpy", "pinned", "torch", "bytes"]


def host_source(device, kind: str, data: np.ndarray):
    if kind == "numpy":
        return data, None
    if kind == "pinned":
        pinned = device.alloc_host(data.nbytes)
        pinned.numpy()[:] = data
        return pinned, pinned
    if kind == "torch":
        import torch

        return torch.from_numpy(data.copy()), None
    return data.tobytes(), None


@pytest.mark.parametrize("host_kind", HOST_KINDS)
def test_memcpy_round_trip_every_kind(device, stream, host_kind):
    """host→device, device→device, device→host (and host→host) preserve every byte."""
    nbytes = 1_048_583
    data = random_bytes(nbytes, seed=1)
    src, pinned = host_source(device, host_kind, data)
    a, b = device.alloc(nbytes), device.alloc(nbytes)
    out = device.alloc_host(nbytes) if host_kind == "pinned" else np.zeros(nbytes, dtype=np.uint8)
    try:
        stream.memcpy_async(a, src)  # H2D
        stream.memcpy_async(b, a)  # D2D
        stream.memcpy_async(out, b)  # D2H
        stream.synchronize()
        got = out.numpy() if host_kind == "pinned" else out
        assert np.array_equal(got, data), f"round trip changed bytes, first at {int(np.argmax(got != data))}"
        if host_kind != "bytes":
            h2h = np.zeros(nbytes, dtype=np.uint8)
            stream.memcpy_async(h2h, src)  # H2H through the stream
            stream.synchronize()
            assert np.array_equal(h2h, data), "host-to-host copy changed bytes"
    finally:
        a.free()
        b.free()
        for host in (out, pinned):
            if hasattr(host, "free"):
                host.free()


def test_memcpy_offsets(device, stream):
    data = random_bytes(10_000, seed=2)
    buf = device.alloc(20_000)
    try:
        stream.memset_async(buf, 0)
        stream.memcpy_async(buf, data, 3_001, dst_offset=5_003, src_offset=1_234)
        got = read_back(stream, buf)
        expected = np.zeros(20_000, dtype=np.uint8)
        expected[5_003:8_004] = data[1_234:4_235]
        assert np.array_equal(got, expected), f"first wrong byte at {int(np.argmax(got != expected))}"
        part = read_back(stream, buf, nbytes=100, offset=5_003)
        assert np.array_equal(part, data[1_234:1_334]), "device-to-host copy from an offset read the wrong bytes"
    finally:
        buf.free()


def test_every_device_round_trip(backend):
    data = random_bytes(4097, seed=3)
    for index in range(backend.device_count()):
        device = backend.device(index)
        stream = device.create_stream()
        buf = device.alloc(data.nbytes)
        try:
            stream.memcpy_async(buf, data)
            got = read_back(stream, buf)
            assert np.array_equal(got, data), f"device {index}: round trip changed bytes"
        finally:
            buf.free()
            stream.close()
    backend.device(0).set_current()


def test_free_waits_for_queued_work(device, stream, long_work):
    """``free`` is synchronising (as ``cudaFree``): work queued before it, behind long work, has run
    by the time it returns, so a copy out of the freed buffer into pinned memory (asynchronous, unlike
    a copy to pageable memory on CUDA) has landed."""
    nbytes = 1 << 20
    buf = device.alloc(nbytes)
    out = device.alloc_host(nbytes)
    try:
        out.numpy()[:] = 0
        long_work.enqueue(stream, final_value=0)
        stream.memset_async(buf, 0x3C)
        stream.memcpy_async(out, buf)
        buf.free()
        landed = bool(np.all(out.numpy() == 0x3C))
        stream.synchronize()
    finally:
        out.free()
    assert landed, "free() returned before the work queued on the buffer had run (free must wait, as cudaFree does)"


def test_free_returns_after_the_devices_queued_work(device, stream, long_work):
    """``free`` waits, checked by an event rather than by data (a second, independent check): an
    event recorded behind long work, before a memset of the buffer, is done when ``free`` returns."""
    buf = device.alloc(1 << 20)
    long_work.enqueue(stream, final_value=0)
    queued = stream.record()
    try:
        stream.memset_async(buf, 0x3C)
        buf.free()
        done = queued.query()
        stream.synchronize()
    finally:
        queued.close()
    assert done is True, "free() returned while work queued on the buffer's device before it was still running"


def test_torch_views_see_the_bytes_at_their_offset(backend, device, stream):
    """``as_tensor(offset=...)`` views the device bytes at that offset: reads see what a copy put
    there, and torch writes land there."""
    require_torch_bridge(backend)
    import torch

    nbytes = 3 * 4096
    data = random_bytes(nbytes, seed=4)
    buf = device.alloc(nbytes)
    try:
        stream.memcpy_async(buf, data)
        stream.synchronize()
        for offset in (0, 256, 4096 + 512):
            view = buf.as_tensor(torch.uint8, (1024,), offset=offset)
            got = view.cpu().numpy()
            assert np.array_equal(got, data[offset:offset + 1024]), (
                f"a torch view at offset {offset} reads other bytes (first wrong at {int(np.argmax(got != data[offset:offset + 1024]))})"
            )
        with stream.torch_stream():
            buf.as_tensor(torch.uint8, (512,), offset=2048).fill_(0xEE)
        stream.synchronize()
        expected = data.copy()
        expected[2048:2560] = 0xEE
        got = read_back(stream, buf)
        assert np.array_equal(got, expected), f"a torch write through a view at offset 2048 landed at byte {int(np.argmax(got != expected))}"
    finally:
        buf.free()


def test_oversize_alloc_raises_out_of_memory(device):
    total = device.memory_info().total
    with pytest.raises(OutOfMemoryError) as info:
        device.alloc(2 * total + (1 << 30))
    assert info.value.backend == device.backend.name, "the error does not name the backend"


@pytest.mark.contract_shape
def test_double_free_raises(device):
    buf = device.alloc(4096)
    buf.free()
    with pytest.raises(ClosedError):
        buf.free()
    pinned = device.alloc_host(4096)
    pinned.free()
    with pytest.raises(ClosedError):
        pinned.free()


@pytest.mark.contract_shape
def test_use_after_close_raises(device):
    stream = device.create_stream()
    buf = device.alloc(4096)
    event = device.create_event()
    buf.free()
    with pytest.raises(ClosedError):
        stream.memset_async(buf, 0)
    with pytest.raises(ClosedError):
        stream.memcpy_async(np.zeros(16, dtype=np.uint8), buf, 16)
    stream.close()
    stream.close()  # safe twice
    live = device.alloc(16)
    try:
        with pytest.raises(ClosedError):
            stream.memset_async(live, 0)
        with pytest.raises(ClosedError):
            stream.synchronize()
    finally:
        live.free()
    event.close()
    with pytest.raises(ClosedError):
        event.query()


@pytest.mark.contract_shape
def test_bad_arguments_raise(device, stream):
    for bad in (-1, 1.5, "8", True):
        with pytest.raises(InvalidArgumentError):
            device.alloc(bad)
    buf = device.alloc(1024)
    try:
        with pytest.raises(InvalidArgumentError):
            stream.memset_async(buf, 256)  # not a byte
        with pytest.raises(InvalidArgumentError):
            stream.memset_async(buf, 0, 1025)  # past the end
        with pytest.raises(InvalidArgumentError):
            stream.memcpy_async(buf, np.zeros(2048, dtype=np.uint8), 2048)  # does not fit
        with pytest.raises(InvalidArgumentError):
            stream.memcpy_async(np.zeros(16, dtype=np.uint8)[::2], buf, 8)  # not contiguous
        with pytest.raises(InvalidArgumentError):
            stream.memcpy_async(bytes(16), buf, 16)  # read-only destination
        with pytest.raises(InvalidArgumentError):
            device.backend.device(device.backend.device_count())  # no such device
        with pytest.raises(InvalidArgumentError):
            stream.memset_async(np.zeros(16, dtype=np.uint8), 0)  # memset needs device memory
    finally:
        buf.free()
