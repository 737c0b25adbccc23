"""Torch bridge for Moore Threads: the ``torch_musa`` extension, device type ``musa``.

torch_musa registers ``musa`` as torch's PrivateUse1 device and provides ``torch.musa.ExternalStream``
and ``torch.musa.stream`` [U]. It has no ``__cuda_array_interface__`` counterpart that we know of, so a
zero-copy view goes through DLPack with device type kDLExtDev, which torch maps to PrivateUse1 [I:
untested on MUSA hardware]. Device graphs use ``torch.musa.MUSAGraph``, which mirrors
``torch.cuda.CUDAGraph`` (capture_begin/capture_end/replay/reset/pool) [U: from torch_musa's public
code; untested on MUSA hardware].
"""
from __future__ import annotations

from anydev.plugin_api.errors import NotSupportedError

from ..cudalike.torch_bridge import StreamGraph
from .dlpack import KDL_EXT_DEV, byte_capsule

INSTALL_HINT = ("install torch_musa (Moore Threads' PyTorch extension) built for your MUSA SDK and torch, "
                "from Moore Threads' release page")


class MusaBridge:
    device_type = "musa"

    def torch_device(self, index: int):
        torch = self._torch_musa()
        return torch.device(self.device_type, index)

    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object):
        torch = self._torch_musa_with_devices()
        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8, device=torch.device(self.device_type, index))
        return torch.utils.dlpack.from_dlpack(byte_capsule(ptr, nbytes, KDL_EXT_DEV, index, owner))

    def torch_stream(self, stream: int, index: int):
        torch = self._torch_musa_with_devices()
        return torch.musa.stream(self._external_stream(torch, stream, index))

    def torch_graph(self, stream: int, index: int):
        torch = self._torch_musa_with_devices()
        graph_class = getattr(torch.musa, "MUSAGraph", None)
        if graph_class is None:
            raise NotSupportedError("moore: this torch_musa has no torch.musa.MUSAGraph, so decode steps cannot "
                                    "be captured as device graphs; upgrade torch_musa or run eagerly (--enforce-eager)")
        return StreamGraph(torch.musa, graph_class(), self._external_stream(torch, stream, index))

    def _external_stream(self, torch, stream: int, index: int):
        external_stream = getattr(torch.musa, "ExternalStream", None)
        if external_stream is None:
            raise NotSupportedError(
                "moore: this torch_musa has no torch.musa.ExternalStream, so torch cannot run on anydev's "
                "streams; upgrade torch_musa"
            )
        return external_stream(stream, device=torch.device(self.device_type, index))

    def _torch_musa(self):
        try:
            import torch_musa  # noqa: F401  (registers torch.musa and the "musa" device type)
        except ImportError as exc:
            raise NotSupportedError(f"moore: the torch bridge needs torch_musa ({exc}); {INSTALL_HINT}") from exc
        import torch

        return torch

    def _torch_musa_with_devices(self):
        torch = self._torch_musa()
        if not torch.musa.is_available():
            raise NotSupportedError("moore: torch_musa is installed but torch.musa.is_available() is False; "
                                    "check the MUSA driver and $MUSA_VISIBLE_DEVICES")
        return torch
