"""EngineConfig.kernels: "unfused" keeps the backend's own kernels but runs every fused one as its parts."""
from __future__ import annotations

import torch

from anydev.core.rank.kernel_choice import select_kernels
from anydev.plugin_api import KernelOffer
from anydev.plugin_api import kernels as K


class _Backend:
    name = "vendor"

    def __init__(self, offered):
        self._offered = offered

    def kernels(self):
        return K.KernelSet(self.name, self._offered, note="test")


def test_unfused_composes_every_fused_kernel_of_the_backends_own_parts():
    calls = []
    offered = {"rms_norm": lambda x, w, eps: calls.append("norm") or x,
               "rotary_write_kv": lambda *args: calls.append("fused rotary"),
               "rotary_embedding": lambda *args: calls.append("rotary"),
               "write_kv": lambda *args: calls.append("write"),
               "quantized_linear": KernelOffer(K.quantized_linear, weight_formats=("q4_k",), dtypes=("bfloat16",)),
               "qk_norm_rotary_write_kv": lambda *args: calls.append("fused qk")}
    native = select_kernels(_Backend(offered), "native")
    unfused = select_kernels(_Backend(offered), "unfused")
    assert native.native == frozenset(offered)
    assert unfused.native == frozenset(offered) - set(K.FUSED)
    assert unfused.supports("quantized_linear", "bfloat16", "q4_k") and not unfused.supports("quantized_linear", "float16")
    assert "qk_norm_rotary_write_kv as rms_norm + rotary_write_kv" in unfused.describe()
    q = torch.zeros(1, 2, 4)
    unfused.qk_norm_rotary_write_kv("pos", q, q[:, :1], "v", "kc", "vc", "slots", "cos_sin", "qw", "kw", 1e-6)
    assert calls == ["norm", "norm", "rotary", "write"]
