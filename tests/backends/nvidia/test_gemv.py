"""The nvidia backend's own batch-1 GEMVs (backends/nvidia/gemv/) where CI can check them, without a
GPU: which calls they take, the switch that turns them off, the driver structs' layout (cuda.h's),
gemv.cu compiled by NVRTC with every kernel it must hold, the typed error when NVRTC is missing, and
the kernels mapping that wraps the Triton quantized_linear. Their numbers are checked on the GPU by
the conformance kernels group (quantized_linear at batch 1)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from cffi import FFI

from anydev.backends.nvidia import kernels as nvidia_kernels
from anydev.backends.nvidia.gemv import driver, kernel, nvrtc
from anydev.plugin_api.errors import BackendUnavailableError, InvalidArgumentError
from anydev.plugin_api.kernel_offers import KernelOffer


@pytest.mark.parametrize("weight_format, rows, K, dtype, fits", [
    ("q4_k", 1, 4096, torch.bfloat16, True),
    ("q4_k", 1, 8192, torch.bfloat16, True),
    ("q8_0_split", 1, 4096, torch.bfloat16, True),
    ("q8_0_split", 1, 2304, torch.bfloat16, True),
    ("q8_0_split", 1, 14336, torch.bfloat16, False),   # the Triton GEMV reads these long rows faster
    ("q4_k", 1, 14336, torch.bfloat16, False),
    ("q6_k_split", 1, 14336, torch.bfloat16, True),    # and these slower: up to 16,384 inputs here
    ("q6_k_split", 1, 16384, torch.bfloat16, True),
    ("q6_k_split", 1, 18432, torch.bfloat16, False),
    ("q4_k", 2, 4096, torch.bfloat16, False),          # batch 1 only
    ("q4_k", 1, 4096, torch.float16, False),           # bfloat16 activations only
    ("q4_k", 1, 4000, torch.bfloat16, False),          # K a multiple of 256
    ("q6_k_split", 1, 4096, torch.bfloat16, True),
    ("q6_k_split", 1, 2304, torch.bfloat16, False),    # its rows 16-byte aligned: K a multiple of 2,048
    ("q6_k", 1, 4096, torch.bfloat16, False),          # no GEMV of its own
    ("q4_0", 1, 4096, torch.bfloat16, True),           # 8 blocks (144 / 160 bytes) a 16-byte aligned load run
    ("q4_1", 1, 14336, torch.bfloat16, True),
    ("q4_0", 1, 4128, torch.bfloat16, False),          # whole blocks, but not whole runs of 8
    ("q4_1", 1, 16640, torch.bfloat16, False),
    ("q8_0", 1, 4096, torch.bfloat16, False),          # loaded as q8_0_split where its GEMV runs
    ("fp8_e4m3", 1, 4096, torch.bfloat16, False),      # per-channel formats: the Triton kernel's
])
def test_the_gemvs_take_only_calls_within_their_limits(weight_format, rows, K, dtype, fits):
    assert kernel.fits(weight_format, rows, K, dtype) is fits


def test_every_gemv_fits_its_longest_rows_in_a_blocks_default_shared_memory():
    # 48 KB a block without opting in (cuFuncSetAttribute), which kernel.launch never asks for
    assert all(spec.shared_bytes(spec.max_k) <= 48 * 1024 for spec in kernel.GEMVS.values())


def test_every_format_has_its_entry_points_in_each_launch_mode():
    names = [spec.kernel for spec in kernel.GEMVS.values()]
    assert len(kernel.KERNELS) == 4 * len(names) == len(set(kernel.KERNELS))
    source = (Path(kernel.__file__).parent / "gemv.cu").read_text()
    assert all(f"ENTRY({name}, {mode})" in source or f"ENTRY_3_AN_SM({name}, {mode})" in source
               for name in names for mode in range(4))


def test_a_cpu_call_is_never_taken():
    x = torch.zeros(1, 4096, dtype=torch.bfloat16)
    assert not kernel.takes(x, torch.zeros(4096, 2304, dtype=torch.uint8), "q4_k")


def test_the_switch_turns_the_gemvs_off_and_rejects_other_values(monkeypatch):
    monkeypatch.delenv(kernel.ENV, raising=False)
    assert kernel.enabled()
    monkeypatch.setenv(kernel.ENV, "0")
    assert not kernel.enabled()
    monkeypatch.setenv(kernel.ENV, "yes")
    with pytest.raises(InvalidArgumentError, match=kernel.ENV):
        kernel.enabled()


def test_the_launch_structs_have_cuda_h_layout():
    """cuda.h's CUlaunchAttribute (an id padded to 8 bytes, a 64-byte union) and CUlaunchConfig (seven
    unsigned ints, then the stream, the attributes and their count at 8-byte alignment)."""
    ffi = FFI()
    ffi.cdef(driver.CDEFS)
    assert (ffi.sizeof("CUlaunchAttribute"), ffi.offsetof("CUlaunchAttribute", "value")) == (72, 8)
    assert ffi.sizeof("CUlaunchConfig") == 56
    assert [ffi.offsetof("CUlaunchConfig", f) for f in ("sharedMemBytes", "hStream", "attrs", "numAttrs")] == \
        [24, 32, 40, 48]


@pytest.mark.parametrize("arch", [80, 90])
def test_gemv_cu_compiles_with_nvrtc_holding_every_kernel_that_kernel_py_launches(arch):
    """NVRTC (a library: no GPU needed) compiles gemv.cu as the backend does at first use, so a change
    to the CUDA C fails here, not first on a GPU. CI installs it (the test extra's nvidia-cuda-nvrtc)."""
    try:
        nvrtc._nvrtc()
    except BackendUnavailableError as missing:
        pytest.skip(f"no NVRTC here ({missing.reason}); pip install nvidia-cuda-nvrtc to compile gemv.cu")
    cubin = nvrtc.compile_cubin((Path(kernel.__file__).parent / "gemv.cu").read_text(), "gemv.cu", arch)
    assert [name for name in kernel.KERNELS if name.encode() not in cubin] == []


def test_a_missing_nvrtc_is_a_typed_error_naming_its_variable_and_the_switch(monkeypatch, tmp_path):
    monkeypatch.setenv(nvrtc.NVRTC.env_var, str(tmp_path / "libnvrtc.so.13"))
    nvrtc._nvrtc.cache_clear()
    try:
        with pytest.raises(BackendUnavailableError, match=nvrtc.NVRTC.env_var):
            nvrtc.compile_cubin("extern \"C\" __global__ void k() {}", "k.cu", 90)
        with pytest.raises(BackendUnavailableError, match=f"{kernel.ENV}=0") as raised:
            kernel.compile_gemvs(90)
        assert raised.value.searched == [f"${nvrtc.NVRTC.env_var}={tmp_path / 'libnvrtc.so.13'}"]
    finally:
        nvrtc._nvrtc.cache_clear()


def test_the_nvidia_kernels_wrap_quantized_linear_and_keep_the_rest():
    """own_kernels replaces quantized_linear's kernel, keeping its offer, and the wrapper hands every
    call it does not take (here a CPU tensor) to the Triton kernel, whose result it returns."""
    calls = []

    def triton_quantized_linear(x, weight, scales, weight_format):
        calls.append(weight_format)
        return x + 1

    offer = KernelOffer(triton_quantized_linear, dtypes=("bfloat16",), weight_formats=("q4_k",))
    rms_norm = object()
    got = nvidia_kernels.own_kernels({"quantized_linear": offer, "rms_norm": rms_norm})
    assert got["rms_norm"] is rms_norm
    wrapped = got["quantized_linear"]
    assert (wrapped.dtypes, wrapped.weight_formats) == (offer.dtypes, offer.weight_formats)
    assert wrapped.kernel is not triton_quantized_linear and wrapped.kernel.__wrapped__ is triton_quantized_linear
    x = torch.zeros(1, 256, dtype=torch.bfloat16)
    assert torch.equal(wrapped.kernel(x, torch.zeros(1, 144, dtype=torch.uint8), None, "q4_k"), x + 1)
    assert calls == ["q4_k"]


def test_a_compiled_cubin_is_kept_and_read_back_by_its_source_arch_and_nvrtc(monkeypatch, tmp_path):
    """The second process to ask loads the cubin the first compiled; another source, architecture or
    NVRTC version compiles anew."""
    compiled = []
    version = [(13, 0)]

    def compile_cubin(source, name, arch):
        compiled.append((source, arch))
        return f"{source}@{arch}".encode()

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(nvrtc, "compile_cubin", compile_cubin)
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: version[0])
    assert nvrtc.cached_cubin("a", "a.cu", 90) == b"a@90" and len(compiled) == 1
    assert nvrtc.cached_cubin("a", "a.cu", 90) == b"a@90" and len(compiled) == 1
    assert [p.parent for p in tmp_path.rglob("*.cubin")] == [tmp_path / "anydev" / "nvrtc"]
    assert nvrtc.cached_cubin("a", "a.cu", 100) == b"a@100" and len(compiled) == 2
    assert nvrtc.cached_cubin("b", "a.cu", 90) == b"b@90" and len(compiled) == 3
    version[0] = (13, 1)
    assert nvrtc.cached_cubin("a", "a.cu", 90) == b"a@90" and len(compiled) == 4


def test_a_cache_that_cannot_be_written_warns_and_still_gives_the_cubin(monkeypatch, tmp_path):
    (tmp_path / "anydev").write_text("a file where the cache's folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(nvrtc, "compile_cubin", lambda source, name, arch: b"cubin")
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (13, 0))
    with pytest.warns(RuntimeWarning, match="XDG_CACHE_HOME"):
        assert nvrtc.cached_cubin("a", "a.cu", 90) == b"cubin"


def test_the_rows_a_warp_takes_agree_with_gemv_cu():
    """q4_0's and q4_1's rows span ROW_LANES lanes in gemv.cu, so a warp takes 32 / ROW_LANES of them:
    kernel.py sizes their grid by ``warp_rows``. Apart, half the rows would go unwritten, which only a
    GPU run would show."""
    source = (Path(kernel.__file__).parent / "gemv.cu").read_text()
    row_lanes = int(re.search(r"^#define ROW_LANES (\d+)$", source, re.M).group(1))
    assert {name: spec.warp_rows for name, spec in kernel.GEMVS.items() if spec.padded} == \
        {"q4_0": 32 // row_lanes, "q4_1": 32 // row_lanes}
