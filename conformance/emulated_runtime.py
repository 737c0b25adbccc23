"""The CUDA-like runtime on anydev's emulated MUSA/MACA libraries, with a torch bridge onto CPU tensors.

The emulated runtimes (``conformance/emulated/``, built with gcc in CI by :mod:`.emulated`) keep device
memory in host memory. On them the real plugin code runs unchanged (cffi bindings, runtime calls, MCCL
collectives); only the torch bridge differs: views are CPU tensors over the emulated device memory,
and torch math runs on the host.

This module registers :class:`EmulatedRuntime` as a runtime variant of the cudalike backends
(``anydev.backends.cudalike.variants``) when imported; :func:`.emulated.build_emulated_runtime` hands
out ``$ANYDEV_CUDALIKE_VARIANTS`` naming it with the library variables, so every process given them
imports it. The moore and metax plugins then build it for a library that exports
``anydevEmulatedRuntime``, which no vendor library does: on a real card the vendor's bridge
(torch_musa, MetaX's torch) is used, or refused with its install hint, never this one. The runtime
says it is emulated wherever it reports itself: ``hardware_label`` ("emulated runtime"),
``runtime_info().notes`` (and so ``anydev list-backends``), the conformance report and test_infer.

Ordering (as the cpu backend): torch CPU math runs synchronously on the calling thread, so
``torch_stream`` synchronizes the stream on entry, and inside the block every memset, copy, event wait,
collective or send/recv (at its group's end, inside a group) this thread enqueues on that stream has
finished before the call returns (the next torch
line may read its result). There are no device graphs: ``torch_graph`` keeps the contract's default
(``NotSupportedError``), so engines decode eagerly; :data:`GRAPHS_NOT_EMULATED` says why.

Groups joined through ``comm_init_rank`` may span processes (the emulated MCCL keeps them in POSIX
shared memory), so the engine's process executors and the suite's ``processes`` group run on it.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading

from anydev.backends.cudalike.library import LoadedLibrary
from anydev.backends.cudalike.runtime import CudaLikeRuntime
from anydev.backends.cudalike.spec import VendorSpec
from anydev.backends.cudalike.variants import register_variant
from anydev.plugin_api.errors import InvalidArgumentError
from anydev.plugin_api.host_torch_streams import HostTorchStreams
from anydev.plugin_api.objects.memory import host_array
from anydev.plugin_api.runtime import DeviceRuntime
from anydev.plugin_api.types import RuntimeInfo

#: Exported only by anydev's emulated runtimes (conformance/emulated/runtime.c); no vendor library has it.
EMULATION_MARKER = "anydevEmulatedRuntime"
TORCH_BRIDGE_NOTE = "torch bridge: CPU tensors over the emulated device memory (host memory)"
#: Why the emulated runtimes run no device graphs (the conformance ``graphs`` group's skip reason).
GRAPHS_NOT_EMULATED = (
    "graphs not emulated: need the vendor torch's capture; the plugin's torch_graph is the vendor torch's own "
    "graph class (torch.musa.MUSAGraph, MetaX torch's CUDAGraph) over the vendor runtime's stream capture, and "
    "CPU torch has neither, so an emulation would certify its own graphs, not the plugin's; only the card shows "
    "the capture, MCCL collectives captured in it and the vendor torch's graph memory pools (nvidia runs the "
    "same StreamGraph code on hardware)"
)


def emulation_of(library: LoadedLibrary) -> str | None:
    """What an emulated runtime library says it is (its marker's text), or None for any other library."""
    try:
        marker = getattr(ctypes.CDLL(library.path), EMULATION_MARKER)
    except (OSError, AttributeError):
        return None
    marker.restype = ctypes.c_char_p
    return marker().decode()


class EmulatedRuntime(CudaLikeRuntime):
    """:class:`CudaLikeRuntime` on an emulated runtime library; torch sees its memory as CPU tensors."""

    torch_graph = DeviceRuntime.torch_graph  # nothing to record: CPU kernels run at once (GRAPHS_NOT_EMULATED)
    # cross_process_collectives stays True: CommInitRank groups live in POSIX shared memory (mccl.c)

    @classmethod
    def claims(cls, library: LoadedLibrary) -> str | None:
        """The runtime variant's test (see ``anydev.backends.cudalike.variants``)."""
        emulation = emulation_of(library)
        return f"an emulated runtime ({emulation})" if emulation else None

    def __init__(self, spec: VendorSpec, runtime_library: LoadedLibrary):
        #: What the emulated runtime says it is.
        self.emulation = emulation_of(runtime_library)
        if not self.emulation:
            raise InvalidArgumentError(
                f"{spec.name}: {runtime_library.path} is not anydev's emulated runtime (it does not export "
                f"{EMULATION_MARKER}); the CPU-tensor torch bridge is only for the emulated runtime"
            )
        super().__init__(spec, runtime_library)
        self.torch_device_type = "cpu"
        self._torch_streams = HostTorchStreams()
        self._inside = threading.local()  # .group_depth, .group_streams: this thread's open groups

    # ---- torch bridge --------------------------------------------------------------------
    def torch_device(self, index: int):
        import torch

        return torch.device("cpu")

    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object):
        """A zero-copy ``uint8`` CPU tensor over emulated device memory; it keeps ``owner`` alive."""
        import torch

        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        return torch.from_numpy(host_array(ptr, nbytes, owner))

    def torch_stream(self, stream: int, index: int) -> contextlib.AbstractContextManager:
        """Orders torch CPU math and the stream's work as if both ran on one stream (module docstring)."""
        return self._torch_streams.block(stream, lambda: self.stream_synchronize(stream))

    def _finish_if_inside_torch_stream(self, stream: int) -> None:
        if self._torch_streams.inside(stream):
            self.stream_synchronize(stream)

    # ---- enqueuing calls: finished before returning inside this thread's torch_stream block ----
    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        super().memset_async(ptr, value, nbytes, stream)
        self._finish_if_inside_torch_stream(stream)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind, stream: int) -> None:
        super().memcpy_async(dst, src, nbytes, kind, stream)
        self._finish_if_inside_torch_stream(stream)

    def stream_wait_event(self, stream: int, event: int) -> None:
        super().stream_wait_event(stream, event)
        self._finish_if_inside_torch_stream(stream)

    def all_reduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        super().all_reduce(send, recv, count, dtype, op, comm, stream)
        self._finish_if_inside_torch_stream(stream)

    def all_gather(self, send, recv, count, dtype, comm, stream) -> None:
        super().all_gather(send, recv, count, dtype, comm, stream)
        self._finish_if_inside_torch_stream(stream)

    def broadcast(self, send, recv, count, dtype, root, comm, stream) -> None:
        super().broadcast(send, recv, count, dtype, root, comm, stream)
        self._finish_if_inside_torch_stream(stream)

    def send(self, send, count, dtype, peer, comm, stream) -> None:
        super().send(send, count, dtype, peer, comm, stream)
        self._finish_point_to_point(stream)

    def recv(self, recv, count, dtype, peer, comm, stream) -> None:
        super().recv(recv, count, dtype, peer, comm, stream)
        self._finish_point_to_point(stream)

    def group_start(self) -> None:
        super().group_start()
        self._inside.group_depth = getattr(self._inside, "group_depth", 0) + 1

    def group_end(self) -> None:
        super().group_end()
        self._inside.group_depth -= 1
        if self._inside.group_depth == 0:   # the group's calls were enqueued just now
            streams, self._inside.group_streams = getattr(self._inside, "group_streams", []), []
            for stream in dict.fromkeys(streams):
                self._finish_if_inside_torch_stream(stream)

    def _finish_point_to_point(self, stream: int) -> None:
        """Inside a group the call is enqueued at group_end: finish its stream then."""
        if getattr(self._inside, "group_depth", 0):
            self._inside.__dict__.setdefault("group_streams", []).append(stream)
        else:
            self._finish_if_inside_torch_stream(stream)

    # ---- what the emulation reports -------------------------------------------------------
    def _hardware_label(self) -> str:
        return "emulated runtime"

    def _optional_call_note(self, label: str, suffixes: tuple[str, ...], bound: bool, verified: bool) -> str:
        return super()._optional_call_note(label, suffixes, bound, True)   # no hardware to verify on

    def kernels(self):
        return {}   # host memory behind an emulated runtime: no device for Triton to run on

    def runtime_info(self) -> RuntimeInfo:
        info = super().runtime_info()
        info.notes = "; ".join(filter(None, (f"emulated runtime: {self.emulation}", info.notes, TORCH_BRIDGE_NOTE)))
        return info


register_variant(EmulatedRuntime)
