"""Torch bridge for runtimes whose torch build uses the ``cuda`` device type (NVIDIA; MetaX's torch).

Zero-copy views go through ``__cuda_array_interface__`` (version 3), which ``torch.as_tensor`` accepts;
torch keeps the interface object, and so the buffer that owns the memory, alive with the tensor.
Streams go through ``torch.cuda.ExternalStream``; device graphs (contract 1.1) are
``torch.cuda.CUDAGraph`` captured on that stream. torch is imported on first use, never at plugin
import.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from anydev.plugin_api.errors import NotSupportedError
from anydev.plugin_api.runtime import TorchGraph


class CudaArrayView:
    """A ``|u1`` byte span of device memory, described by ``__cuda_array_interface__``."""

    def __init__(self, ptr: int, nbytes: int, owner: object):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None,
        }
        self.owner = owner


@dataclass(frozen=True)
class CudaArrayBridge:
    """``install_hint`` says which torch build provides CUDA-device tensors for this vendor."""

    vendor: str
    install_hint: str
    device_type: str = "cuda"

    def torch_device(self, index: int):
        import torch

        return torch.device(self.device_type, index)

    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object):
        torch = self._torch_with_devices()
        device = torch.device(self.device_type, index)
        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8, device=device)
        return torch.as_tensor(CudaArrayView(ptr, nbytes, owner), device=device)

    def torch_stream(self, stream: int, index: int):
        torch = self._torch_with_devices()
        external = torch.cuda.ExternalStream(stream, device=torch.device(self.device_type, index))
        return torch.cuda.stream(external)

    def torch_graph(self, stream: int, index: int) -> TorchGraph:
        torch = self._torch_with_devices()
        external = torch.cuda.ExternalStream(stream, device=torch.device(self.device_type, index))
        return StreamGraph(torch.cuda, torch.cuda.CUDAGraph(), external)

    def _torch_with_devices(self):
        import torch

        if not torch.cuda.is_available():
            raise NotSupportedError(
                f"{self.vendor}: the torch bridge needs a torch build that sees the devices "
                f"(torch {torch.__version__} reports torch.cuda.is_available() == False); {self.install_hint}"
            )
        return torch


class StreamGraph(TorchGraph):
    """A torch device graph (``torch.cuda.CUDAGraph``, or a vendor's copy of it) on an external stream.

    ``accelerator`` is the torch module of the device type (``torch.cuda``, ``torch.musa``). The
    capture is what ``torch.cuda.graph(g, pool, stream, capture_error_mode="thread_local")`` does,
    without its ``torch.cuda.empty_cache()``: that call reaches every device's allocator, and in a
    thread-per-rank engine the other ranks are capturing on theirs at the same moment.
    """

    def __init__(self, accelerator, graph, stream):
        self._accelerator = accelerator
        self._graph = graph
        self._stream = stream

    @contextlib.contextmanager
    def capture(self, share_memory_with: "StreamGraph | None" = None):
        pool = () if share_memory_with is None else (share_memory_with._graph.pool(),)
        self._stream.synchronize()   # the warm-up and anything else before the capture has run
        with self._accelerator.stream(self._stream):
            self._graph.capture_begin(*pool, capture_error_mode="thread_local")
            try:
                yield
            except BaseException as exc:
                self._end_failed_capture(exc)
                raise
            self._graph.capture_end()

    def _end_failed_capture(self, exc: BaseException) -> None:
        """End a capture whose body raised, so the stream leaves capture mode; a second failure is
        attached to the first error, which stays the one raised."""
        try:
            self._graph.capture_end()
        except Exception as end_error:  # reported on the original error
            exc.add_note(f"ending the failed capture also failed: {type(end_error).__name__}: {end_error}")

    def replay(self) -> None:
        with self._accelerator.stream(self._stream):
            self._graph.replay()

    def close(self) -> None:
        self._graph.reset()
        self._graph = None
