"""The real moore and metax plugins on the emulated MUSA and MACA runtimes (C, built here with gcc).

A few end-to-end calls per vendor; the conformance suite checks the contract exhaustively.
"""
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from anydev.conformance.emulated import EmulatedBuildError, build_emulated_runtime
from anydev.conformance.support import run_ranks
from anydev.plugin_api import NotSupportedError, OutOfMemoryError, Registry, RuntimeCallError

VENDORS = ("moore", "metax")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler (gcc) to build the emulated runtimes")
    return tmp_path_factory.mktemp("emulated")


@pytest.fixture(params=VENDORS)
def backend(request, build_dir, monkeypatch):
    for name, value in build_emulated_runtime(request.param, build_dir).items():
        monkeypatch.setenv(name, value)
    registry = Registry(builtin_modules=(f"anydev.backends.{request.param}.plugin",), entry_point_group=None)
    return registry.load(request.param)


def test_the_real_plugin_loads_the_emulated_libraries(backend, build_dir):
    runtime = backend.runtime
    assert runtime.hardware_label == "emulated runtime"
    assert backend.device_count() == int(os.environ.get("ANYDEV_EMULATED_DEVICE_COUNT", "4"))
    info = runtime.runtime_info()
    assert all(path.startswith(str(build_dir)) for path in info.library_paths)
    assert info.collective_version == "1.0.0" and "emulated" in info.notes
    assert runtime.not_ready_code == 600


def test_memset_then_copy_back(backend):
    device = backend.device(1)
    stream = device.create_stream()
    buffer = device.alloc(4099)
    stream.memset_async(buffer, 0xAB)
    stream.memset_async(buffer, 0x01, nbytes=10, offset=5)
    host = np.zeros(4099, np.uint8)
    stream.memcpy_async(host, buffer)
    done = stream.record()
    stream.synchronize()
    assert done.query() is True
    expected = np.full(4099, 0xAB, np.uint8)
    expected[5:15] = 1
    np.testing.assert_array_equal(host, expected)
    assert buffer.ptr % 256 == 0
    buffer.free()


def _all_reduce_two_ranks(backend, values, dtype, op):
    """Each rank r holds values[r]; returns what each rank reads back, and whether an event recorded
    after rank 0's all_reduce was "not ready" before rank 1 had enqueued its part."""
    devices = [backend.device(0), backend.device(1)]
    comms = backend.create_communicators(devices)
    results, rank0_enqueued, not_ready = {}, threading.Event(), []

    def rank(r):
        device = devices[r]
        device.set_current()
        stream = device.create_stream()
        data = np.asarray(values[r], dtype=dtype)
        buffer = device.alloc(data.nbytes)
        stream.memcpy_async(buffer, data)
        if r == 1:
            rank0_enqueued.wait()
        comms[r].all_reduce(buffer, op=op, stream=stream, count=data.size, dtype=dtype)
        if r == 0:  # rank 1 has not joined, so the collective cannot have finished
            event = stream.record()
            not_ready.append(event.query())
            rank0_enqueued.set()
        out = np.empty_like(data)
        stream.memcpy_async(out, buffer)
        stream.synchronize()
        results[r] = out

    try:
        run_ranks(2, rank, "2 emulated ranks", timeout=60)
    finally:
        for comm in comms:
            comm.close()
    return results, not_ready


@pytest.mark.parametrize("dtype,op,values,expected", [
    ("float32", "sum", [[1.5, -2, 3], [0.25, 4, 3]], [1.75, 2, 6]),
    ("int32", "max", [[1, -7, 9], [5, -8, 9]], [5, -7, 9]),
])
def test_all_reduce_across_two_thread_ranks(backend, dtype, op, values, expected):
    results, not_ready = _all_reduce_two_ranks(backend, values, dtype, op)
    assert not_ready == [False]  # event query said "not ready" while a peer had not arrived
    for r in (0, 1):
        np.testing.assert_array_equal(results[r], np.asarray(expected, dtype=dtype))


def test_bfloat16_and_float16_all_reduce(backend):
    import torch

    for torch_dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        inputs = [torch.tensor([0.1, 1000.5, -3.25, 2.0 ** -20], dtype=torch_dtype) for _ in range(2)]
        inputs[1] = inputs[1] * 3
        raw = [t.view(torch.int16).numpy().view(np.uint16) for t in inputs]
        devices = [backend.device(0), backend.device(1)]
        comms = backend.create_communicators(devices)
        outs = {}

        def rank(r):
            devices[r].set_current()
            stream = devices[r].create_stream()
            buffer = devices[r].alloc(raw[r].nbytes)
            stream.memcpy_async(buffer, raw[r])
            comms[r].all_reduce(buffer, op="sum", stream=stream, count=4, dtype=name)
            out = np.empty_like(raw[r])
            stream.memcpy_async(out, buffer)
            stream.synchronize()
            outs[r] = torch.from_numpy(out.view(np.int16)).view(torch_dtype)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        [t.start() for t in threads]
        [t.join(timeout=60) for t in threads]
        expected = (inputs[0].double() + inputs[1].double()).to(torch_dtype)
        for r in (0, 1):
            assert torch.equal(outs[r], expected), (name, outs[r], expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_rank_all_reduce_keeps_every_16_bit_float(backend, dtype):
    """Exercises the emulator's software float16/bfloat16 conversions on all 65536 bit patterns."""
    patterns = np.arange(1 << 16, dtype=np.uint16)
    device = backend.device(0)
    (comm,) = backend.create_communicators([device])
    stream = device.create_stream()
    buffer = device.alloc(patterns.nbytes)
    stream.memcpy_async(buffer, patterns)
    comm.all_reduce(buffer, op="sum", stream=stream, count=patterns.size, dtype=dtype)
    out = np.empty_like(patterns)
    stream.memcpy_async(out, buffer)
    stream.synchronize()
    exponent_all_ones = 0x7C00 if dtype == "float16" else 0x7F80
    is_nan = ((patterns & exponent_all_ones) == exponent_all_ones) & ((patterns & ~np.uint16(0x8000 | exponent_all_ones)) != 0)
    np.testing.assert_array_equal(out[~is_nan], patterns[~is_nan])
    assert np.all((out[is_nan] & exponent_all_ones) == exponent_all_ones)  # NaN stays NaN
    assert np.all((out[is_nan] & ~np.uint16(0x8000 | exponent_all_ones)) != 0)


def test_a_peer_that_never_arrives_is_an_error_not_a_hang(backend, monkeypatch):
    monkeypatch.setenv("ANYDEV_EMULATED_COLLECTIVE_TIMEOUT", "0.2")
    devices = [backend.device(0), backend.device(1)]
    comms = backend.create_communicators(devices)
    stream = devices[0].create_stream()
    buffer = devices[0].alloc(16)
    comms[0].all_reduce(buffer, stream=stream, count=4, dtype="float32")  # rank 1 never joins
    with pytest.raises(RuntimeCallError, match="timed out") as info:
        stream.synchronize()
    assert info.value.call.endswith("StreamSynchronize")
    comms[0].broadcast(buffer, stream=stream, count=4, dtype="float32")  # the group stays broken
    with pytest.raises(RuntimeCallError, match="timed out"):
        stream.synchronize()
    stream.synchronize()  # the error was reported once; the stream itself still works


def test_typed_errors_from_the_emulated_runtime(backend):
    device = backend.device(0)
    with pytest.raises(OutOfMemoryError):
        device.alloc(1 << 50)
    with pytest.raises(RuntimeCallError) as info:
        backend.runtime.free(0x1234500)
    error = info.value
    assert error.code == 1 and error.error_message == "invalid argument"
    if backend.name == "moore":
        assert error.error_name == "musaErrorInvalidValue"
    else:  # MACA has no mcGetErrorName: the runtime's own string names the error
        assert backend.runtime.check.error_name_function is None and error.error_name == "invalid argument"


def test_the_emulated_runtime_gets_a_cpu_tensor_bridge_labelled_emulated(backend):
    import torch

    from anydev.conformance.emulated_runtime import EmulatedRuntime

    runtime = backend.runtime
    assert isinstance(runtime, EmulatedRuntime) and runtime.hardware_label == "emulated runtime"
    assert backend.torch_device_type == "cpu" and backend.device(1).torch_device == torch.device("cpu")
    assert "emulated" in runtime.runtime_info().notes and "torch bridge: CPU tensors" in runtime.runtime_info().notes
    assert not backend.supports("torch_graph")  # CPU kernels run at once: the engine decodes eagerly
    device = backend.device(1)
    stream = device.create_stream()
    buffer = device.alloc(4096)
    stream.memset_async(buffer, 0)
    stream.memset_async(buffer, 7, nbytes=8, offset=1024)
    stream.synchronize()
    view = buffer.as_tensor(torch.uint8, (16,), offset=1020)   # zero-copy, at the offset asked for
    assert view.tolist() == [0] * 4 + [7] * 8 + [0] * 4
    view.fill_(9)                                              # writes reach the device memory
    host = np.zeros(4096, np.uint8)
    stream.memcpy_async(host, buffer)
    stream.synchronize()
    assert host[1020:1036].tolist() == [9] * 16 and host[:1020].sum() == 0 and host[1036:].sum() == 0


def test_inside_torch_stream_a_collective_has_finished_before_torch_reads(backend):
    """Rank 1 joins the all_reduce late (it starts once rank 0 is about to enqueue, then lingers);
    rank 0 reads the tensor on the next torch line, inside torch_stream(), and must see the sum (the
    stream order torch would have on a GPU), not its own value."""
    import torch

    devices = [backend.device(0), backend.device(1)]
    comms = backend.create_communicators(devices)
    seen, rank0_enqueuing = {}, threading.Event()

    def rank(r):
        devices[r].set_current()
        stream = devices[r].create_stream()
        buffer = devices[r].alloc(16)
        with stream.torch_stream():
            tensor = buffer.as_tensor(torch.float32, (4,))
            tensor.fill_(r + 1.0)
            if r == 0:
                rank0_enqueuing.set()
            else:
                rank0_enqueuing.wait(timeout=30)
                time.sleep(0.2)  # makes a missing wait visible; the result does not depend on it
            comms[r].all_reduce(tensor, op="sum", stream=stream)
            seen[r] = tensor.tolist()
        stream.synchronize()

    try:
        run_ranks(2, rank, "2 emulated ranks", timeout=60)
    finally:
        for comm in comms:
            comm.close()
    assert seen == {0: [3.0] * 4, 1: [3.0] * 4}


def test_a_library_without_the_emulation_marker_gets_the_vendor_torch_bridge(build_dir, monkeypatch):
    """A runtime that does not report itself as emulated (as a vendor's) keeps the vendor's bridge:
    torch_musa (moore) or MetaX's cuda torch (metax), refused here with the install hint."""
    from anydev.conformance.emulated_runtime import EmulatedRuntime
    from anydev.backends.cudalike.runtime import CudaLikeRuntime

    for vendor, device_type, hint in (("moore", "musa", "torch_musa"), ("metax", "cuda", "MetaX")):
        for name, value in build_emulated_runtime(vendor, build_dir, extra_defines=("EMU_NO_MARKER",)).items():
            monkeypatch.setenv(name, value)
        runtime = Registry(builtin_modules=(f"anydev.backends.{vendor}.plugin",), entry_point_group=None).load(vendor).runtime
        assert type(runtime) is CudaLikeRuntime and runtime.claimed_by is None
        assert runtime.torch_device_type == device_type
        with pytest.raises(NotSupportedError, match=hint):
            runtime.tensor_from_pointer(runtime.malloc(64), 64, 0, owner=None)
        with pytest.raises(Exception, match="not anydev's emulated runtime"):
            EmulatedRuntime(runtime.spec, runtime.runtime_library)


def test_the_vendor_bridge_is_refused_on_the_emulated_library(backend):
    """Built directly (not through the plugin), the vendor runtime class never hands emulated host
    memory to the vendor's torch bridge."""
    from anydev.backends.cudalike.runtime import CudaLikeRuntime
    from anydev.conformance.emulated_runtime import EmulatedRuntime

    runtime = CudaLikeRuntime(backend.runtime.spec)
    assert runtime.claimed_by is EmulatedRuntime
    with pytest.raises(NotSupportedError, match="refused on an emulated runtime"):
        runtime.tensor_from_pointer(runtime.malloc(64), 64, 0, owner=None)


def test_metax_has_no_runtime_version_function(build_dir, monkeypatch):
    for name, value in build_emulated_runtime("metax", build_dir).items():
        monkeypatch.setenv(name, value)
    runtime = Registry(builtin_modules=("anydev.backends.metax.plugin",), entry_point_group=None).load("metax").runtime
    assert "has no mcRuntimeGetVersion" in runtime.runtime_info().runtime_version


NOT_READY_SCRIPT = """
import threading, numpy as np
from anydev.plugin_api import Registry
backend = Registry(builtin_modules=("anydev.backends.moore.plugin",), entry_point_group=None).load("moore")
devices = [backend.device(0), backend.device(1)]
comms = backend.create_communicators(devices)
streams = [d.create_stream() for d in devices]
buffers = [d.alloc(16) for d in devices]
comms[0].all_reduce(buffers[0], stream=streams[0], count=4, dtype="float32")
event = streams[0].record()
print(backend.runtime.not_ready_code, event.query())
comms[1].all_reduce(buffers[1], stream=streams[1], count=4, dtype="float32")
event.synchronize()
print(event.query())
"""


def test_not_ready_code_is_resolved_at_load_time(build_dir):
    """A runtime whose "not ready" is 34, not 600: the plugin asks the runtime, it does not assume."""
    env = dict(os.environ, **build_emulated_runtime("moore", build_dir, extra_defines=("EMU_NOT_READY_CODE=34",)))
    result = subprocess.run([sys.executable, "-c", NOT_READY_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["34", "False", "True"]


def test_build_without_a_compiler_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-anydev")
    with pytest.raises(EmulatedBuildError, match="install gcc"):
        build_emulated_runtime("moore", tmp_path)
