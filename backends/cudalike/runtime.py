"""CudaLikeRuntime: the DeviceRuntime of every CUDA-shaped runtime (CUDA, MUSA, MACA) + its NCCL-like library.

Construction loads both libraries (cffi ABI mode), binds every function once, resolves the
"not ready" code, and checks that a device is visible; it creates no device context. Each call then
costs one cffi call and one comparison; failures become typed errors in :mod:`.check`.
"""
from __future__ import annotations

import functools
from typing import Sequence

import cffi

from anydev.plugin_api.errors import (BackendUnavailableError, CollectiveAbortedError, InvalidArgumentError,
                                     NotSupportedError)
from anydev.plugin_api.runtime import POINT_TO_POINT_CALLS, DeviceRuntime
from anydev.plugin_api.types import DTYPE_SIZES, MemoryInfo, RuntimeInfo

from . import cdefs
from .check import Checker
from .library import LoadedLibrary, load_library
from .spec import VendorSpec
from .variants import variant_for

UNIQUE_ID_BYTES = 128


@functools.lru_cache(maxsize=None)
def ffi_for(rt: str, ccl: str) -> cffi.FFI:
    """One parsed FFI per (runtime prefix, collective prefix)."""
    ffi = cffi.FFI()
    ffi.cdef(cdefs.render(rt, ccl))
    return ffi


def cuda_style_version(value: int) -> str:
    """12040 → "12.4" (CUDA's major*1000 + minor*10; assumed for MUSA [I])."""
    return f"{value // 1000}.{value % 1000 // 10}"


def nccl_style_version(value: int) -> str:
    """22703 → "2.27.3" (NCCL ≥ 2.9: X*10000 + Y*100 + Z; older: X*1000 + Y*100 + Z)."""
    if value >= 10000:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


def bind(loaded: LoadedLibrary, symbol: str, backend: str):
    """The function ``symbol`` of a loaded library; a missing one makes the backend unavailable."""
    try:
        return getattr(loaded.lib, symbol)
    except AttributeError:
        raise BackendUnavailableError(
            backend, f"{loaded.path} does not export {symbol}; is it the right library and version?"
        ) from None


def bind_optional(loaded: LoadedLibrary, symbol: str):
    """The function ``symbol``, or None when the library does not export it (cffi ABI mode raises
    AttributeError on first access to a missing symbol)."""
    try:
        return getattr(loaded.lib, symbol)
    except AttributeError:
        return None


class CudaLikeRuntime(DeviceRuntime):
    """The runtime described by ``spec``. See :class:`DeviceRuntime` for each method's contract."""

    def __init__(self, spec: VendorSpec, runtime_library: LoadedLibrary | None = None):
        """``runtime_library``: the runtime, already loaded (by :func:`~.plugin.open_runtime`); else it is found here."""
        self.spec = spec
        self.name = spec.name   # the plugin's name (the same spec), for messages while loading
        self.torch_device_type = spec.torch_bridge.device_type
        self.rt, self.ccl = spec.rt, spec.ccl
        self.ffi = ffi_for(spec.rt, spec.ccl)

        self.runtime_library = runtime_library or load_library(self.ffi, spec.runtime_library, spec.name,
                                                               spec.sdk_roots, spec.lib_subdirs)
        self._bind_runtime(self.runtime_library)
        self.check = self._make_checker()
        self.not_ready_code = self.check.find_code("ErrorNotReady", "not ready", spec.runtime.not_ready_candidates)
        claim = variant_for(self.runtime_library, spec.name)
        #: The runtime variant (:mod:`.variants`) that claims this library, and what it says the library
        #: is; None, None on a vendor's own library.
        self.claimed_by, self.claim = claim if claim is not None else (None, None)
        self._device_count = self._count_devices()  # before loading the CCL: "no driver" is the likelier cause

        self.ccl_library = load_library(self.ffi, spec.ccl_library, spec.name, spec.sdk_roots, spec.lib_subdirs)
        self._bind_collectives(self.ccl_library)
        self.hardware_label = self._hardware_label()

        constants = spec.runtime
        self._memcpy_kinds = constants.memcpy_kinds
        self._stream_flags = constants.stream_non_blocking
        self._event_flags = {True: constants.event_default, False: constants.event_disable_timing}
        self._dtypes = spec.collectives.dtypes
        self._reduce_ops = spec.collectives.reduce_ops
        self.collective_dtypes = tuple(dtype for dtype in DTYPE_SIZES if dtype in self._dtypes)
        self.reduce_ops = tuple(self._reduce_ops)

    # ---- loading -------------------------------------------------------------------------
    def _bind_runtime(self, loaded: LoadedLibrary) -> None:
        def fn(suffix):
            return bind(loaded, self.rt + suffix, self.name)

        self._get_device_count = fn("GetDeviceCount")
        self._set_device = fn("SetDevice")
        self._get_device = fn("GetDevice")
        self._device_synchronize = fn("DeviceSynchronize")
        self._device_get_attribute = fn("DeviceGetAttribute")
        self._mem_get_info = fn("MemGetInfo")
        self._malloc = fn("Malloc")
        self._free = fn("Free")
        self._malloc_host = fn("MallocHost")
        self._free_host = fn("FreeHost")
        self._memset_async = fn("MemsetAsync")
        self._memcpy_async = fn("MemcpyAsync")
        self._stream_create = fn("StreamCreateWithFlags")
        self._stream_synchronize = fn("StreamSynchronize")
        self._stream_wait_event = fn("StreamWaitEvent")
        self._stream_destroy = fn("StreamDestroy")
        self._event_create = fn("EventCreateWithFlags")
        self._event_record = fn("EventRecord")
        self._event_query = fn("EventQuery")
        self._event_synchronize = fn("EventSynchronize")
        self._event_elapsed_time = fn("EventElapsedTime")
        self._event_destroy = fn("EventDestroy")
        self._get_error_string = fn("GetErrorString")
        self._runtime_get_version = bind_optional(loaded, self.rt + "RuntimeGetVersion")
        self._driver_get_version = bind_optional(loaded, self.rt + "DriverGetVersion")

    def _bind_collectives(self, loaded: LoadedLibrary) -> None:
        def fn(suffix):
            return bind(loaded, self.ccl + suffix, self.name)

        self._ccl_get_version = fn("GetVersion")
        self._ccl_get_unique_id = fn("GetUniqueId")
        self._ccl_comm_init_rank = fn("CommInitRank")
        self._ccl_comm_init_all = fn("CommInitAll")
        self._ccl_comm_destroy = fn("CommDestroy")
        self._ccl_get_error_string = fn("GetErrorString")
        self._ccl_all_reduce = fn("AllReduce")
        self._ccl_all_gather = fn("AllGather")
        self._ccl_broadcast = fn("Broadcast")
        point_to_point = [bind_optional(loaded, self.ccl + suffix) for suffix in ("Send", "Recv", "GroupStart", "GroupEnd")]
        #: (send, recv, group_start, group_end), or None when the library lacks any of them.
        self._ccl_point_to_point = tuple(point_to_point) if all(f is not None for f in point_to_point) else None
        self._ccl_comm_abort = bind_optional(loaded, self.ccl + "CommAbort")   # None: not exported
        #: Communicators aborted and not yet destroyed: the library freed them (as ncclCommAbort does).
        self._aborted: set[int] = set()

    def _make_checker(self) -> Checker:
        ffi = self.ffi
        error_name = bind_optional(self.runtime_library, f"{self.rt}GetErrorName")  # absent on MACA

        def text(function):
            return lambda code: ffi.string(function(code)).decode(errors="replace")

        return Checker(self.name, self.ccl, error_string=text(self._get_error_string),
                       error_name=None if error_name is None else text(error_name),
                       ccl_error_string=lambda code: text(self._ccl_get_error_string)(code))  # bound later

    def _count_devices(self) -> int:
        count = self.ffi.new("int *")
        code = self._get_device_count(count)
        if code:
            error = self.check.runtime_error(f"{self.rt}GetDeviceCount", code)
            raise BackendUnavailableError(
                self.name, f"{error.call} failed with {error.error_name} ({code}): {error.error_message} "
                f"(runtime loaded from {self.runtime_library.path}); is the {self.spec.hardware_name} driver "
                "installed and a device visible?",
            )
        if count[0] == 0:
            raise BackendUnavailableError(
                self.name, f"{self.rt}GetDeviceCount reports 0 devices (runtime loaded from "
                f"{self.runtime_library.path}); check the driver and ${self.spec.visible_devices_env}",
            )
        return count[0]

    def _hardware_label(self) -> str:
        attributes = self.spec.compute_capability_attributes
        if attributes is None:
            return self.spec.hardware_name
        major, minor = (self._attribute(attribute, 0) for attribute in attributes)
        return f"{self.spec.hardware_name} (compute capability {major}.{minor})"

    def memory_bandwidth_peak(self, index: int) -> float | None:
        """Peak memory bandwidth of device ``index`` in bytes/s (memory clock x bus width x 2, double
        data rate), or None where the spec does not name the attributes. Not a contract call: the
        conformance report's performance row compares its measurements with it where it exists."""
        attributes = self.spec.memory_peak_attributes
        if attributes is None:
            return None
        clock_khz, bus_bits = (self._attribute(attribute, index) for attribute in attributes)
        return clock_khz * 1e3 * 2 * bus_bits / 8

    def _attribute(self, attribute: int, device: int) -> int:
        value = self.ffi.new("int *")
        self.check.runtime(f"{self.rt}DeviceGetAttribute", self._device_get_attribute(value, attribute, device))
        return value[0]

    # ---- devices -------------------------------------------------------------------------
    def device_count(self) -> int:
        return self._device_count

    def set_device(self, index: int) -> None:
        code = self._set_device(index)
        if code:
            raise self.check.runtime_error(f"{self.rt}SetDevice({index})", code)

    def get_device(self) -> int:
        device = self.ffi.new("int *")
        self.check.runtime(f"{self.rt}GetDevice", self._get_device(device))
        return device[0]

    def device_synchronize(self) -> None:
        self.check.runtime(f"{self.rt}DeviceSynchronize", self._device_synchronize())

    def memory_info(self) -> MemoryInfo:
        free, total = self.ffi.new("size_t *"), self.ffi.new("size_t *")
        self.check.runtime(f"{self.rt}MemGetInfo", self._mem_get_info(free, total))
        return MemoryInfo(free=free[0], total=total[0])

    # ---- memory --------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        ptr = self.ffi.new("uintptr_t *")
        code = self._malloc(ptr, nbytes)
        if code:
            raise self.check.runtime_error(f"{self.rt}Malloc({nbytes} bytes)", code)
        return ptr[0]

    def free(self, ptr: int) -> None:
        code = self._free(ptr)
        if code:
            raise self.check.runtime_error(f"{self.rt}Free({ptr:#x})", code)

    def malloc_host(self, nbytes: int) -> int:
        ptr = self.ffi.new("uintptr_t *")
        code = self._malloc_host(ptr, nbytes)
        if code:
            raise self.check.runtime_error(f"{self.rt}MallocHost({nbytes} bytes)", code)
        return ptr[0]

    def free_host(self, ptr: int) -> None:
        code = self._free_host(ptr)
        if code:
            raise self.check.runtime_error(f"{self.rt}FreeHost({ptr:#x})", code)

    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        code = self._memset_async(ptr, value, nbytes, stream)
        if code:
            raise self.check.runtime_error(f"{self.rt}MemsetAsync", code)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind, stream: int) -> None:
        code = self._memcpy_async(dst, src, nbytes, self._memcpy_kinds[kind], stream)
        if code:
            raise self.check.runtime_error(f"{self.rt}MemcpyAsync", code)

    # ---- streams -------------------------------------------------------------------------
    def stream_create(self) -> int:
        stream = self.ffi.new("uintptr_t *")
        self.check.runtime(f"{self.rt}StreamCreateWithFlags", self._stream_create(stream, self._stream_flags))
        return stream[0]

    def stream_synchronize(self, stream: int) -> None:
        code = self._stream_synchronize(stream)
        if code:
            raise self.check.runtime_error(f"{self.rt}StreamSynchronize", code)

    def stream_wait_event(self, stream: int, event: int) -> None:
        code = self._stream_wait_event(stream, event, 0)
        if code:
            raise self.check.runtime_error(f"{self.rt}StreamWaitEvent", code)

    def stream_destroy(self, stream: int) -> None:
        self.check.runtime(f"{self.rt}StreamDestroy", self._stream_destroy(stream))

    # ---- events --------------------------------------------------------------------------
    def event_create(self, timing: bool) -> int:
        event = self.ffi.new("uintptr_t *")
        self.check.runtime(f"{self.rt}EventCreateWithFlags", self._event_create(event, self._event_flags[bool(timing)]))
        return event[0]

    def event_record(self, event: int, stream: int) -> None:
        code = self._event_record(event, stream)
        if code:
            raise self.check.runtime_error(f"{self.rt}EventRecord", code)

    def event_query(self, event: int) -> bool:
        code = self._event_query(event)
        if code == 0:
            return True
        if code == self.not_ready_code:
            return False
        raise self.check.runtime_error(f"{self.rt}EventQuery", code)

    def event_synchronize(self, event: int) -> None:
        code = self._event_synchronize(event)
        if code:
            raise self.check.runtime_error(f"{self.rt}EventSynchronize", code)

    def event_elapsed_ms(self, start: int, end: int) -> float:
        ms = self.ffi.new("float *")
        self.check.runtime(f"{self.rt}EventElapsedTime", self._event_elapsed_time(ms, start, end))
        return float(ms[0])

    def event_destroy(self, event: int) -> None:
        self.check.runtime(f"{self.rt}EventDestroy", self._event_destroy(event))

    # ---- collectives ---------------------------------------------------------------------
    def comm_init_all(self, devices: Sequence[int]) -> list[int]:
        devices = list(devices)
        comms = self.ffi.new("uintptr_t[]", len(devices))
        devlist = self.ffi.new("int[]", devices)
        self.check.ccl(f"{self.ccl}CommInitAll", self._ccl_comm_init_all(comms, len(devices), devlist))
        return list(comms)

    def comm_unique_id(self) -> bytes:
        unique_id = self.ffi.new(f"{self.ccl}UniqueId *")
        self.check.ccl(f"{self.ccl}GetUniqueId", self._ccl_get_unique_id(unique_id))
        return bytes(self.ffi.buffer(unique_id))

    def comm_init_rank(self, unique_id: bytes, nranks: int, rank: int) -> int:
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise InvalidArgumentError(
                f"{self.name}: a unique id has {UNIQUE_ID_BYTES} bytes (from comm_unique_id), got {len(unique_id)}"
            )
        struct = self.ffi.new(f"{self.ccl}UniqueId *")
        self.ffi.memmove(struct, unique_id, UNIQUE_ID_BYTES)
        comm = self.ffi.new("uintptr_t *")
        self.check.ccl(f"{self.ccl}CommInitRank(rank {rank} of {nranks})",
                       self._ccl_comm_init_rank(comm, nranks, struct[0], rank))
        return comm[0]

    def comm_destroy(self, comm: int) -> None:
        if comm in self._aborted:   # {ccl}CommAbort freed it: destroying it again would free it twice
            self._aborted.discard(comm)
            return
        self.check.ccl(f"{self.ccl}CommDestroy", self._ccl_comm_destroy(comm))

    def comm_abort(self, comm: int) -> None:
        """``{ccl}CommAbort``: ends the communicator's kernels and frees it (NCCL's semantics)."""
        if self._ccl_comm_abort is None:
            raise NotSupportedError(f"{self.name}: {self.ccl_library.path} does not export {self.ccl}CommAbort; "
                                    "communicator abort (contract 1.4) is unavailable")
        self._live(comm, "CommAbort")
        self._aborted.add(comm)   # first: a collective called meanwhile is refused, not run on a freed handle
        self.check.ccl(f"{self.ccl}CommAbort", self._ccl_comm_abort(comm))

    def _live(self, comm: int, call: str) -> None:
        if comm in self._aborted:
            raise CollectiveAbortedError(f"{self.name}: {self.ccl}{call} on communicator {comm:#x}, which was aborted "
                                         f"({self.ccl}CommAbort freed it); create new communicators")

    def all_reduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        self._live(comm, "AllReduce")
        code = self._ccl_all_reduce(send, recv, count, self._dtype(dtype), self._reduce_op(op), comm, stream)
        if code:
            raise self.check.ccl_error(f"{self.ccl}AllReduce", code)

    def all_gather(self, send, recv, count, dtype, comm, stream) -> None:
        self._live(comm, "AllGather")
        code = self._ccl_all_gather(send, recv, count, self._dtype(dtype), comm, stream)
        if code:
            raise self.check.ccl_error(f"{self.ccl}AllGather", code)

    def broadcast(self, send, recv, count, dtype, root, comm, stream) -> None:
        self._live(comm, "Broadcast")
        code = self._ccl_broadcast(send, recv, count, self._dtype(dtype), root, comm, stream)
        if code:
            raise self.check.ccl_error(f"{self.ccl}Broadcast", code)

    # ---- point-to-point (contract 1.3) ----------------------------------------------------
    def supports(self, call: str) -> bool:
        """As :meth:`DeviceRuntime.supports`; the point-to-point calls only when the collective
        library exports them (``{ccl}Send``, ``{ccl}Recv``, ``{ccl}GroupStart``, ``{ccl}GroupEnd``),
        ``comm_abort`` only when it exports ``{ccl}CommAbort``."""
        if call in POINT_TO_POINT_CALLS and getattr(self, "_ccl_point_to_point", None) is None:
            return False
        if call == "comm_abort" and getattr(self, "_ccl_comm_abort", None) is None:
            return False
        return super().supports(call)

    def send(self, send, count, dtype, peer, comm, stream) -> None:
        self._live(comm, "Send")
        code = self._point_to_point("Send", 0)(send, count, self._dtype(dtype), peer, comm, stream)
        if code:
            raise self.check.ccl_error(f"{self.ccl}Send(to rank {peer})", code)

    def recv(self, recv, count, dtype, peer, comm, stream) -> None:
        self._live(comm, "Recv")
        code = self._point_to_point("Recv", 1)(recv, count, self._dtype(dtype), peer, comm, stream)
        if code:
            raise self.check.ccl_error(f"{self.ccl}Recv(from rank {peer})", code)

    def group_start(self) -> None:
        self.check.ccl(f"{self.ccl}GroupStart", self._point_to_point("GroupStart", 2)())

    def group_end(self) -> None:
        self.check.ccl(f"{self.ccl}GroupEnd", self._point_to_point("GroupEnd", 3)())

    def _point_to_point(self, suffix: str, index: int):
        if self._ccl_point_to_point is None:
            raise NotSupportedError(
                f"{self.name}: {self.ccl_library.path} does not export {self.ccl}Send, {self.ccl}Recv, "
                f"{self.ccl}GroupStart and {self.ccl}GroupEnd; point-to-point send/recv (contract 1.3) is unavailable"
            )
        return self._ccl_point_to_point[index]

    def _optional_call_note(self, label: str, suffixes: tuple[str, ...], bound: bool, verified: bool) -> str:
        """How an optional contract call is made here, for runtime_info: the library functions behind
        it, or that they are not exported, and whether they were verified on this vendor's hardware."""
        functions = "/".join(self.ccl + suffix for suffix in suffixes)
        if not bound:
            return f"{label}: unavailable ({functions} not exported)"
        where = "" if verified else f", unverified on {self.spec.hardware_name}"
        return f"{label}: {functions}{where}"

    def _dtype(self, dtype: str) -> int:
        try:
            return self._dtypes[dtype]
        except KeyError:
            raise InvalidArgumentError(f"{self.name}: no collective dtype {dtype!r}; use one of {list(self._dtypes)}") from None

    def _reduce_op(self, op: str) -> int:
        try:
            return self._reduce_ops[op]
        except KeyError:
            raise InvalidArgumentError(f"{self.name}: no reduce op {op!r}; use one of {list(self._reduce_ops)}") from None

    # ---- torch bridge --------------------------------------------------------------------
    def torch_device(self, index: int):
        return self.spec.torch_bridge.torch_device(index)

    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object):
        self._check_real_device_memory()
        return self.spec.torch_bridge.tensor_from_pointer(ptr, nbytes, index, owner)

    def torch_stream(self, stream: int, index: int):
        self._check_real_device_memory()
        return self.spec.torch_bridge.torch_stream(stream, index)

    def torch_graph(self, stream: int, index: int):
        self._check_real_device_memory()
        return self.spec.torch_bridge.torch_graph(stream, index)

    def _check_real_device_memory(self) -> None:
        if self.claimed_by is not None and not isinstance(self, self.claimed_by):
            raise NotSupportedError(
                f"{self.name}: the {self.spec.hardware_name} torch bridge is refused on {self.claim}, which is not "
                f"the vendor's runtime; load it through the plugin (open_runtime), which builds "
                f"{self.claimed_by.__name__} for it"
            )

    # ---- optional ------------------------------------------------------------------------
    @property
    def kernels_note(self) -> str:
        note = "Triton" + (f" and {self.spec.own_kernels_note}" if self.spec.own_kernels else "")
        if self.spec.triton_kernels_verified:
            return note
        return f"{note}, unverified on {self.spec.hardware_name}"

    def kernels(self):
        """The shared Triton kernels (``anydev.backends.triton_kernels``) when Triton is importable
        (CUDA builds of torch bundle it; MUSA and MACA ship their own), with the vendor's own over them
        (``VendorSpec.own_kernels``); none without Triton."""
        from anydev.backends.triton_kernels import kernels, triton_importable

        if not triton_importable():
            return {}
        found = kernels()
        return self.spec.own_kernels(found) if self.spec.own_kernels else found

    def runtime_info(self) -> RuntimeInfo:
        notes = [self._optional_call_note("send/recv", ("Send", "Recv"), self._ccl_point_to_point is not None,
                                           self.spec.send_recv_verified),
                  self._optional_call_note("comm_abort", ("CommAbort",), self._ccl_comm_abort is not None,
                                           self.spec.comm_abort_verified)]
        if self.not_ready_code is None:
            notes.append(f"not-ready code unresolved among {self.spec.runtime.not_ready_candidates}: "
                         "event_query raises while work runs")
        return RuntimeInfo(
            runtime_version=self._version(self._runtime_get_version, "RuntimeGetVersion", cuda_style_version),
            driver_version=self._version(self._driver_get_version, "DriverGetVersion", cuda_style_version),
            collective_library=self.spec.ccl_display_name,
            collective_version=self._ccl_version(),
            library_paths=[self.runtime_library.path, self.ccl_library.path],
            notes="; ".join(notes),
        )

    def _version(self, function, suffix: str, formatter) -> str:
        if function is None:
            return f"unknown ({self.runtime_library.path} has no {self.rt}{suffix})"
        value = self.ffi.new("int *")
        self.check.runtime(f"{self.rt}{suffix}", function(value))
        return formatter(value[0])

    def _ccl_version(self) -> str:
        value = self.ffi.new("int *")
        self.check.ccl(f"{self.ccl}GetVersion", self._ccl_get_version(value))
        return nccl_style_version(value[0])
