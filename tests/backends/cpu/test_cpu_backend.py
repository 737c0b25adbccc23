"""The cpu reference backend: what is specific to it (virtual devices from env, libc memory accounting,
worker-thread streams, in-process collectives), plus a smoke test of each call.

The backend-generic contract is checked by the conformance suite; these tests go through the public
objects, loaded by a fresh ``Registry`` so that each test sees its own environment.
"""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
import torch

from anydev.backends.cpu.config import CpuConfig, parse_size
from anydev.conformance.support import run_ranks
from anydev.plugin_api import (
    CONTRACT_VERSION, BackendUnavailableError, ClosedError, CollectiveTimeoutError, Communicator, CopyKind,
    InvalidArgumentError, OutOfMemoryError, Registry, RuntimeCallError,
)

CPU_PLUGIN = "anydev.backends.cpu.plugin"
DEVICE_MEMORY = 2**20


def load_cpu():
    """A fresh cpu backend built from the current environment (the shared registry caches one)."""
    return Registry(builtin_modules=(CPU_PLUGIN,), entry_point_group=None).load("cpu")


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.setenv("ANYDEV_CPU_DEVICES", "4")
    monkeypatch.setenv("ANYDEV_CPU_DEVICE_MEMORY", "1MiB")
    monkeypatch.setenv("ANYDEV_CPU_COLLECTIVE_TIMEOUT", "20")
    backend = load_cpu()
    yield backend
    backend.close()


def hold_stream(backend, stream):
    """Block ``stream`` behind a 2-rank collective whose other rank is only enqueued by the returned
    ``release()``: a gate made from public calls, so later work on ``stream`` waits for us."""
    other = backend.device(3 if stream.device.index != 3 else 2)
    comms = backend.create_communicators([stream.device, other])
    held = torch.zeros(1)
    comms[0].all_reduce(held, stream=stream)

    def release():
        other_stream = other.create_stream()
        comms[1].all_reduce(torch.zeros(1), stream=other_stream)
        other_stream.synchronize()
        other_stream.close()

    release.held = held  # the held collective's memory lives as long as the gate
    return release


def read_back(device, buffer, dtype=np.uint8) -> np.ndarray:
    stream = device.create_stream()
    out = np.empty(buffer.nbytes, np.uint8)
    stream.memcpy_async(out, buffer)
    stream.synchronize()
    stream.close()
    return out.view(dtype)


# ---- configuration ---------------------------------------------------------------------------
def test_device_count_and_capacity_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("ANYDEV_CPU_DEVICES", "3")
    monkeypatch.setenv("ANYDEV_CPU_DEVICE_MEMORY", "512KiB")
    backend = load_cpu()
    assert backend.device_count() == 3
    assert backend.device(2).memory_info().total == 512 * 1024
    with pytest.raises(InvalidArgumentError, match="3 device"):
        backend.device(3)
    backend.close()


def test_defaults_are_eight_devices_of_four_gib(monkeypatch):
    for variable in ("ANYDEV_CPU_DEVICES", "ANYDEV_CPU_DEVICE_MEMORY", "ANYDEV_CPU_COLLECTIVE_TIMEOUT"):
        monkeypatch.delenv(variable, raising=False)
    config = CpuConfig.from_env()
    assert (config.num_devices, config.device_memory) == (8, 4 * 2**30)


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("512MiB", 512 * 2**20), ("4GiB", 4 * 2**30), ("2 KB", 2000), ("1.5kib", 1536),
])
def test_sizes_are_parsed_with_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("variable, value", [
    ("ANYDEV_CPU_DEVICES", "eight"), ("ANYDEV_CPU_DEVICES", "-1"), ("ANYDEV_CPU_DEVICES", "0"),
    ("ANYDEV_CPU_DEVICE_MEMORY", "4 parsecs"), ("ANYDEV_CPU_COLLECTIVE_TIMEOUT", "0"),
])
def test_a_bad_setting_is_a_typed_error_naming_the_variable(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(BackendUnavailableError, match=variable):
        load_cpu()


def test_collective_timeout_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ANYDEV_CPU_COLLECTIVE_TIMEOUT", "2.5")
    backend = load_cpu()
    assert backend.runtime.collective_timeout_s == 2.5
    backend.close()


# ---- devices and memory ----------------------------------------------------------------------
def test_current_device_is_per_thread(backend):
    backend.device(2).set_current()
    seen_by_other_thread = run_ranks(1, lambda _: backend.runtime.get_device(), "another thread")[0]
    assert seen_by_other_thread == 0
    assert backend.current_device().index == 2


def test_memory_info_accounts_allocations_per_device(backend):
    dev0, dev1 = backend.device(0), backend.device(1)
    assert dev0.memory_info().free == DEVICE_MEMORY
    buffer = dev0.alloc(1000)
    assert dev0.memory_info().free == DEVICE_MEMORY - 1000
    assert dev1.memory_info().free == DEVICE_MEMORY
    buffer.free()
    assert dev0.memory_info().free == DEVICE_MEMORY


def test_allocations_are_aligned_and_zero_bytes_work(backend):
    device = backend.device(0)
    buffers = [device.alloc(n) for n in (0, 1, 3, 1000)]
    assert all(b.ptr != 0 and b.ptr % 256 == 0 for b in buffers)
    assert len({b.ptr for b in buffers}) == len(buffers)
    assert buffers[0].as_tensor().numel() == 0
    for b in buffers:
        b.free()


def test_new_device_memory_is_not_zero_so_forgotten_zeroing_shows(backend):
    from anydev.backends.cpu.memory import UNINITIALISED

    buffer = backend.device(0).alloc(4096)
    assert set(read_back(backend.device(0), buffer).tolist()) == {UNINITIALISED} != {0}
    buffer.free()


def test_oversize_allocation_says_requested_and_free(backend):
    device = backend.device(0)
    held = device.alloc(DEVICE_MEMORY - 100)
    with pytest.raises(OutOfMemoryError, match=r"cannot allocate 101 bytes on cpu:0: 100 bytes free"):
        device.alloc(101)
    assert device.memory_info().free == 100  # the failed allocation took nothing
    held.free()


def test_pinned_host_memory_is_accounted_apart_from_devices(backend):
    device = backend.device(0)
    host = device.alloc_host(4096)
    assert device.memory_info().free == DEVICE_MEMORY
    assert host.ptr % 256 == 0
    host.numpy()[:] = 9
    assert host.as_tensor().sum().item() == 9 * 4096
    host.free()


def test_double_free_and_unknown_pointers_raise_instead_of_crashing(backend):
    runtime = backend.runtime
    buffer = backend.device(0).alloc(64)
    address = buffer.ptr
    buffer.free()
    with pytest.raises(ClosedError):
        buffer.free()
    with pytest.raises(RuntimeCallError, match="cpuErrorInvalidValue.*not a live allocation"):
        runtime.free(address)
    stranger = np.zeros(64, np.uint8)
    with pytest.raises(RuntimeCallError, match="not a live allocation"):
        runtime.free(stranger.ctypes.data)
    host = runtime.malloc_host(64)
    with pytest.raises(RuntimeCallError, match="free_host"):
        runtime.free(host)
    runtime.free_host(host)
    with pytest.raises(RuntimeCallError):
        runtime.free_host(host)


def test_device_addresses_are_checked_before_anything_is_enqueued(backend):
    runtime = backend.runtime
    device = backend.device(0)
    stream = device.create_stream()
    buffer = device.alloc(64)
    with pytest.raises(RuntimeCallError, match="not inside a live device allocation"):
        runtime.memset_async(buffer.ptr + 32, 0, 64, stream.handle)  # runs past the end
    freed = device.alloc(64)
    address = freed.ptr
    freed.free()
    with pytest.raises(RuntimeCallError, match="not inside a live device allocation"):
        runtime.memcpy_async(address, buffer.ptr, 64, CopyKind.DEVICE_TO_DEVICE, stream.handle)
    with pytest.raises(RuntimeCallError, match="not inside a live device allocation"):
        runtime.tensor_from_pointer(address, 64, 0, None)
    stream.synchronize()  # nothing failed on the stream: the calls were refused up front
    buffer.free()
    stream.close()


def test_bad_arguments_raise_invalid_argument_error(backend):
    runtime = backend.runtime
    stream = backend.device(0).create_stream()
    buffer = backend.device(0).alloc(16)
    with pytest.raises(InvalidArgumentError):
        runtime.malloc(-1)
    with pytest.raises(InvalidArgumentError):
        runtime.set_device(4)
    with pytest.raises(InvalidArgumentError, match="byte"):
        runtime.memset_async(buffer.ptr, 256, 16, stream.handle)
    with pytest.raises(InvalidArgumentError, match="copy kind"):
        runtime.memcpy_async(buffer.ptr, buffer.ptr, 16, 7, stream.handle)
    (comm,) = runtime.comm_init_all([0])
    with pytest.raises(InvalidArgumentError, match="float8"):
        runtime.all_reduce(buffer.ptr, buffer.ptr, 4, "float8", "sum", comm, stream.handle)
    with pytest.raises(InvalidArgumentError, match="xor"):
        runtime.all_reduce(buffer.ptr, buffer.ptr, 4, "float32", "xor", comm, stream.handle)
    with pytest.raises(InvalidArgumentError, match="root"):
        runtime.broadcast(buffer.ptr, buffer.ptr, 4, "float32", 1, comm, stream.handle)
    with pytest.raises(InvalidArgumentError, match="own device"):
        runtime.comm_init_all([1, 1])
    with pytest.raises(RuntimeCallError, match="cpuErrorInvalidResourceHandle"):
        runtime.stream_synchronize(123456)
    runtime.comm_destroy(comm)
    buffer.free()
    stream.close()


def test_use_after_close_raises_closed_error(backend):
    device = backend.device(0)
    buffer = device.alloc(16)
    stream = device.create_stream()
    buffer.free()
    with pytest.raises(ClosedError):
        buffer.as_tensor()
    stream.close()
    stream.close()  # safe twice
    with pytest.raises(ClosedError):
        stream.synchronize()
    left_allocated = device.alloc(16)
    backend.close()
    with pytest.raises(ClosedError):
        backend.device(0)
    with pytest.raises(ClosedError, match="backend 'cpu'"):
        backend.runtime.stream_create()
    left_allocated.free()  # memory outlives the backend's close, so views never dangle


# ---- streams and events ----------------------------------------------------------------------
def test_stream_work_runs_in_order_and_synchronize_waits_for_it(backend):
    device = backend.device(0)
    stream = device.create_stream()
    buffer = device.alloc(256)
    out = np.zeros(256, np.uint8)
    release = hold_stream(backend, stream)
    stream.memset_async(buffer, 1)
    stream.memset_async(buffer, 2, nbytes=128)
    stream.memcpy_async(out, buffer)
    done = stream.record(device.create_event())
    assert not done.query()  # held: nothing after the gate has run
    release()
    stream.synchronize()
    assert done.query()
    assert out[:128].tolist() == [2] * 128 and out[128:].tolist() == [1] * 128
    buffer.free()
    stream.close()


def test_events_order_work_across_two_streams(backend):
    device = backend.device(0)
    producer, consumer = device.create_stream(), device.create_stream()
    buffer = device.alloc(64)
    out = np.zeros(64, np.uint8)
    release = hold_stream(backend, producer)
    producer.memset_async(buffer, 5)
    ready = producer.record(device.create_event())
    consumer.wait(ready)
    consumer.memcpy_async(out, buffer)
    copied = consumer.record(device.create_event())
    assert not copied.query()  # the consumer waits behind the held producer
    release()
    copied.synchronize()
    assert out.tolist() == [5] * 64
    buffer.free()
    producer.close()
    consumer.close()


def test_waiting_on_a_never_recorded_event_does_not_block(backend):
    device = backend.device(0)
    stream = device.create_stream()
    event = device.create_event()
    assert event.query()
    stream.wait(event)
    stream.synchronize()
    stream.close()


def test_elapsed_time_needs_completed_timing_events(backend):
    device = backend.device(0)
    runtime = backend.runtime
    stream = device.create_stream()
    start, end = device.create_event(timing=True), device.create_event(timing=True)
    plain = device.create_event(timing=False)
    with pytest.raises(RuntimeCallError, match="never recorded"):
        runtime.event_elapsed_ms(start.handle, end.handle)
    release = hold_stream(backend, stream)
    stream.record(start)
    stream.record(end)
    with pytest.raises(RuntimeCallError, match="cpuErrorNotReady"):
        runtime.event_elapsed_ms(start.handle, end.handle)
    release()
    end.synchronize()
    assert start.elapsed_ms(end) >= 0.0
    stream.record(plain)
    plain.synchronize()
    with pytest.raises(RuntimeCallError, match="without timing"):
        runtime.event_elapsed_ms(plain.handle, end.handle)
    stream.close()


def test_an_event_of_another_device_cannot_be_recorded(backend):
    stream = backend.device(0).create_stream()
    foreign = backend.device(1).create_event()
    with pytest.raises(RuntimeCallError, match="cpu:1"):
        foreign.record(stream)
    stream.close()


def test_a_failed_operation_surfaces_at_synchronize_and_stays(backend):
    dev0, dev1 = backend.device(0), backend.device(1)
    comm0, comm1 = backend.create_communicators([dev0, dev1])
    s0, s1 = dev0.create_stream(), dev1.create_stream()
    buffer = dev0.alloc(16)
    s0.memset_async(buffer, 0)
    s0.synchronize()
    comm0.all_reduce(torch.ones(4), stream=s0)
    comm1.all_reduce(torch.ones(8), stream=s1)  # disagrees on count: both ranks fail
    s0.memset_async(buffer, 7)  # skipped: the stream has failed
    after = s0.record(dev0.create_event())
    waiter = dev0.create_stream()
    waiter.wait(after)
    for stream in (s0, s1):
        with pytest.raises(RuntimeCallError, match=r"rank 0: all_reduce\(count=4.*rank 1: all_reduce\(count=8"):
            stream.synchronize()
    with pytest.raises(RuntimeCallError, match="different collectives"):
        s0.synchronize()  # sticky
    with pytest.raises(RuntimeCallError, match="different collectives"):
        after.synchronize()  # the event carries its stream's failure ...
    with pytest.raises(RuntimeCallError, match="different collectives"):
        waiter.synchronize()  # ... to the streams that wait on it
    assert read_back(dev0, buffer).tolist() == [0] * 16
    for stream in (s0, s1, waiter):
        stream.close()
    buffer.free()


def test_destroying_a_stream_finishes_its_work_first(backend):
    device = backend.device(0)
    stream = device.create_stream()
    buffer = device.alloc(32)
    release = hold_stream(backend, stream)
    stream.memset_async(buffer, 3)
    closer = threading.Thread(target=stream.close)
    closer.start()
    release()
    closer.join()
    assert read_back(device, buffer).tolist() == [3] * 32
    buffer.free()


def test_an_error_nobody_synchronized_on_is_raised_when_the_stream_is_destroyed(backend):
    backend.runtime.collective_timeout_s = 0.2
    dev0 = backend.device(0)
    comm0, _ = backend.create_communicators([dev0, backend.device(1)])
    stream = dev0.create_stream()
    comm0.all_reduce(torch.ones(1), stream=stream)
    with pytest.raises(CollectiveTimeoutError):
        stream.close()
    assert stream.closed


# ---- collectives -----------------------------------------------------------------------------
def test_collectives_between_thread_ranks(backend):
    devices = [backend.device(i) for i in range(3)]
    comms = backend.create_communicators(devices)

    def rank_work(rank):
        devices[rank].set_current()
        stream = devices[rank].create_stream()
        summed = torch.full((5,), rank + 1.0, dtype=torch.bfloat16)
        comms[rank].all_reduce(summed, op="sum", stream=stream)
        biggest = torch.tensor([rank, -rank], dtype=torch.float16)
        comms[rank].all_reduce(biggest, op="max", stream=stream)
        averaged = torch.tensor([rank * 3 + 1], dtype=torch.int32)
        comms[rank].all_reduce(averaged, op="avg", stream=stream)
        gathered = torch.zeros(6, dtype=torch.int32)
        gathered[2 * rank: 2 * rank + 2] = rank + 10
        comms[rank].all_gather(gathered[2 * rank: 2 * rank + 2], gathered, stream=stream)  # in place
        sent = torch.arange(4, dtype=torch.float32) * (rank + 1)
        comms[rank].broadcast(sent, root=1, stream=stream)
        stream.synchronize()
        stream.close()
        return summed.tolist(), biggest.tolist(), averaged.tolist(), gathered.tolist(), sent.tolist()

    for result in run_ranks(3, rank_work, "3 ranks"):
        assert result == ([6.0] * 5, [2.0, 0.0], [4], [10, 10, 11, 11, 12, 12], [0.0, 2.0, 4.0, 6.0])


def test_communicators_from_a_unique_id(backend):
    unique_id = backend.comm_unique_id()

    def rank_work(rank):
        device = backend.device(rank)
        comm = Communicator.from_unique_id(device, unique_id, 2, rank)
        stream = device.create_stream()
        buffer = device.alloc(8)
        buffer.as_tensor(torch.int32)[:] = torch.tensor([rank + 1, 10 * rank])
        comm.all_reduce(buffer, op="prod", stream=stream, count=2, dtype="int32")
        stream.synchronize()
        values = buffer.as_tensor(torch.int32).tolist()
        buffer.free()
        stream.close()
        comm.close()
        return values

    assert run_ranks(2, rank_work, "2 ranks") == [[2, 0], [2, 0]]


def test_a_missing_peer_times_out_instead_of_hanging(backend):
    backend.runtime.collective_timeout_s = 0.2
    dev0, dev1 = backend.device(0), backend.device(1)
    comm0, comm1 = backend.create_communicators([dev0, dev1])
    stream = dev0.create_stream()
    comm0.all_reduce(torch.ones(4), stream=stream)  # rank 1 never calls it
    with pytest.raises(CollectiveTimeoutError, match=r"rank 0 of 2 waited 0.2 s.*rank\(s\) \[1\] never reached it"):
        stream.synchronize()
    late = dev1.create_stream()
    comm1.all_reduce(torch.ones(4), stream=late)
    with pytest.raises(CollectiveTimeoutError, match="broken"):
        late.synchronize()  # the group is unusable after a timeout, and says so at once
    for s in (stream, late):
        s.close()


def test_joining_a_group_times_out_when_a_rank_never_joins(backend):
    backend.runtime.collective_timeout_s = 0.2
    unique_id = backend.comm_unique_id()
    with pytest.raises(CollectiveTimeoutError, match=r"rank\(s\) \[1\] never joined"):
        Communicator.from_unique_id(backend.device(0), unique_id, 2, 0)


def test_an_unknown_unique_id_is_refused(backend):
    with pytest.raises(InvalidArgumentError, match="unknown"):
        Communicator.from_unique_id(backend.device(0), b"not-an-id", 2, 0)


# ---- torch bridge ----------------------------------------------------------------------------
def test_tensor_view_is_zero_copy_both_ways(backend):
    device = backend.device(0)
    stream = device.create_stream()
    buffer = device.alloc(16)
    view = buffer.as_tensor(torch.int32)
    assert view.data_ptr() == buffer.ptr and view.device == torch.device("cpu")
    view[:] = torch.tensor([1, -2, 3, 40000])
    out = np.zeros(4, np.int32)
    stream.memcpy_async(out, buffer)
    stream.synchronize()
    assert out.tolist() == [1, -2, 3, 40000]
    stream.memset_async(buffer, 0)
    stream.synchronize()
    assert view.tolist() == [0, 0, 0, 0]
    buffer.free()
    stream.close()


def test_a_tensor_view_keeps_its_buffer_alive(backend):
    buffer = backend.device(0).alloc(8)
    alive = weakref.ref(buffer)
    view = buffer.as_tensor(torch.float32)[1:]
    del buffer
    gc.collect()
    assert alive() is not None
    del view
    gc.collect()
    assert alive() is None


def test_torch_stream_orders_earlier_async_work_before_torch_math(backend):
    device = backend.device(0)
    stream = device.create_stream()
    buffer = device.alloc(4096)
    release = hold_stream(backend, stream)
    stream.memset_async(buffer, 1)
    releaser = threading.Thread(target=release)
    releaser.start()
    with stream.torch_stream():
        total = buffer.as_tensor().sum().item()  # sees the memset, though it was queued behind the gate
    releaser.join()
    assert total == 4096
    buffer.free()
    stream.close()


def test_work_queued_inside_torch_stream_is_done_before_the_next_torch_line(backend):
    """On one stream, torch math after a collective sees its result (as on a GPU stream)."""
    devices = [backend.device(0), backend.device(1)]
    comms = backend.create_communicators(devices)

    def rank(r):
        devices[r].set_current()
        stream = devices[r].create_stream()
        with stream.torch_stream():
            value = torch.full((1024,), float(r + 1))
            comms[r].all_reduce(value, stream=stream)
            seen = value.clone()  # no synchronize: the stream order alone must guarantee the sum
        stream.close()
        return seen

    for seen in run_ranks(2, rank, "2 ranks in torch_stream"):
        assert torch.equal(seen, torch.full((1024,), 3.0))


def test_device_synchronize_and_runtime_info(backend):
    device = backend.device(1)
    stream = device.create_stream()
    buffer = device.alloc(64)
    out = np.zeros(64, np.uint8)
    stream.memset_async(buffer, 4)
    stream.memcpy_async(out, buffer)
    device.synchronize()
    assert out.tolist() == [4] * 64
    info = backend.runtime.runtime_info()
    assert info.runtime_version.startswith("anydev cpu ")
    assert "4 virtual devices of 1048576 bytes" in info.notes
    assert backend.runtime.contract_version == CONTRACT_VERSION
    buffer.free()
    stream.close()
