"""The cpu backend's switch for the shared Triton kernels (``ANYDEV_CPU_TRITON=1``, run by Triton's
interpreter, how CI checks them): off by default, refused with a reason when the interpreter is not on,
and when on, every contract 1.2 kernel is the Triton one. (The kernels' numbers are checked by the
conformance suite's kernels group, which scripts/test.sh runs with both variables set.)"""
from __future__ import annotations

import pytest

from anydev.backends.cpu.config import TRITON_ENV, CpuConfig
from anydev.backends.cpu.runtime import CpuRuntime
from anydev.backends.triton_kernels import triton_importable
from anydev.plugin_api import Backend, BackendUnavailableError
from anydev.plugin_api.kernels import KERNEL_NAMES


def test_off_by_default_every_kernel_is_the_reference():
    backend = Backend(CpuRuntime(CpuConfig.from_env({})))
    try:
        assert backend.kernels().native == frozenset()
        assert backend.kernels().describe().startswith("cpu kernels: reference write_kv, ")
    finally:
        backend.close()


def test_on_without_the_interpreter_is_refused_naming_it():
    with pytest.raises(BackendUnavailableError, match="TRITON_INTERPRET=1"):
        CpuConfig.from_env({TRITON_ENV: "1"})


def test_a_malformed_value_is_refused_naming_the_variable():
    with pytest.raises(BackendUnavailableError, match=TRITON_ENV):
        CpuConfig.from_env({TRITON_ENV: "yes"})


@pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")
def test_on_with_the_interpreter_every_kernel_is_triton():
    config = CpuConfig.from_env({TRITON_ENV: "1", "TRITON_INTERPRET": "1"})
    backend = Backend(CpuRuntime(config))
    try:
        kernels = backend.kernels()
        assert kernels.native == frozenset(KERNEL_NAMES)
        assert "native (Triton interpreter)" in kernels.describe()
        assert kernels.rms_norm.__name__ == "rms_norm"
    finally:
        backend.close()
