"""Torch bridge for runtimes whose torch build uses the ``cuda`` device type (NVIDIA; MetaX's torch).

Zero-copy views go through ``__cuda_array_interface__`` (version 3), which ``torch.as_tensor`` accepts;
torch keeps the interface object, and so the buffer that owns the memory, alive with the tensor.
Streams go through ``torch.cuda.ExternalStream``. torch is imported on first use, never at plugin
import.
"""
from __future__ import annotations

from dataclasses import dataclass

from anydev.plugin_api.errors import NotSupportedError


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

    def _torch_with_devices(self):
        import torch

        if not torch.cuda.is_available():
            raise NotSupportedError(
                f"{self.vendor}: the torch bridge needs a torch build that sees the devices "
                f"(torch {torch.__version__} reports torch.cuda.is_available() == False); {self.install_hint}"
            )
        return torch
