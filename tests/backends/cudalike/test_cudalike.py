"""The CUDA-like binding core without a GPU: library search, the error checker, load-time code
resolution, cdefs, version formatting and the torch-bridge helpers."""
import gc
import os
import shutil
import weakref

import _cffi_backend
import cffi
import numpy as np
import pytest

from anydev.backends.cudalike import cdefs
from anydev.backends.cudalike.check import Checker
from anydev.backends.cudalike.library import EnvRoot, ExecutableRoot, LibrarySpec, LoadedLibrary, dlopen, load_library
from anydev.backends.cudalike.runtime import bind_optional, cuda_style_version, ffi_for, nccl_style_version
from anydev.backends.cudalike.torch_bridge import CudaArrayBridge
from anydev.plugin_api import BackendUnavailableError, NotSupportedError, OutOfMemoryError, Registry, RuntimeCallError

SPEC = LibrarySpec(label="libfake", env_var="ANYDEV_TEST_FAKE_LIBRARY", file_names=("libfake.so.1",),
                   pip_paths=("fakevendor/lib/libfake.so.1",))
ROOTS = (EnvRoot("ANYDEV_TEST_FAKE_HOME"),)


def real_shared_object(path):
    """Put a real, loadable shared object (cffi's own extension module) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_cffi_backend.__file__, path)
    return str(path)


def load(site_dirs=()):
    return load_library(cffi.FFI(), SPEC, "fakevendor", ROOTS, ("lib",), site_dirs=list(site_dirs))


@pytest.fixture(autouse=True)
def no_fake_env(monkeypatch):
    monkeypatch.delenv("ANYDEV_TEST_FAKE_LIBRARY", raising=False)
    monkeypatch.delenv("ANYDEV_TEST_FAKE_HOME", raising=False)


# ---- library search --------------------------------------------------------------------------
def test_exact_env_var_wins_then_sdk_root_then_pip(tmp_path, monkeypatch):
    exact = real_shared_object(tmp_path / "exact" / "anything.so")
    in_root = real_shared_object(tmp_path / "sdk" / "lib" / "libfake.so.1")
    site = tmp_path / "site-packages"
    in_pip = real_shared_object(site / "fakevendor" / "lib" / "libfake.so.1")
    monkeypatch.setenv("ANYDEV_TEST_FAKE_HOME", str(tmp_path / "sdk"))
    monkeypatch.setenv("ANYDEV_TEST_FAKE_LIBRARY", exact)
    assert load([site]).path == exact
    monkeypatch.delenv("ANYDEV_TEST_FAKE_LIBRARY")
    assert load([site]).path == in_root
    monkeypatch.delenv("ANYDEV_TEST_FAKE_HOME")
    assert load([site]).path == in_pip


def test_exact_env_var_naming_a_missing_file_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    real_shared_object(tmp_path / "sdk" / "lib" / "libfake.so.1")
    monkeypatch.setenv("ANYDEV_TEST_FAKE_HOME", str(tmp_path / "sdk"))
    missing = str(tmp_path / "nowhere" / "libfake.so.1")
    monkeypatch.setenv("ANYDEV_TEST_FAKE_LIBRARY", missing)
    with pytest.raises(BackendUnavailableError) as info:
        load()
    assert "$ANYDEV_TEST_FAKE_LIBRARY" in info.value.reason and missing in info.value.reason
    assert info.value.searched == [f"$ANYDEV_TEST_FAKE_LIBRARY={missing}"]


def test_exact_env_var_naming_a_directory_says_so(tmp_path, monkeypatch):
    directory = tmp_path / "sdk" / "lib"
    real_shared_object(directory / "libfake.so.1")
    monkeypatch.setenv("ANYDEV_TEST_FAKE_LIBRARY", str(directory))
    with pytest.raises(BackendUnavailableError) as info:
        load()
    assert info.value.reason == (f"$ANYDEV_TEST_FAKE_LIBRARY names {directory}, which is a directory; "
                                 "name the library file in it (libfake.so.1) or unset it")


def test_a_file_that_is_not_a_library_reports_the_loader_error(tmp_path, monkeypatch):
    bogus = tmp_path / "sdk" / "lib" / "libfake.so.1"
    bogus.parent.mkdir(parents=True)
    bogus.write_text("not an ELF file\n" * 100)
    monkeypatch.setenv("ANYDEV_TEST_FAKE_HOME", str(tmp_path / "sdk"))
    with pytest.raises(BackendUnavailableError) as info:
        load()
    reason = info.value.reason
    assert reason.startswith("libfake was found but could not be loaded")
    assert str(bogus) in reason and "ELF" in reason  # the dynamic loader's own words ("invalid ELF header")


def test_nothing_found_lists_names_paths_and_env_vars(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYDEV_TEST_FAKE_HOME", str(tmp_path / "sdk"))
    site = tmp_path / "site-packages"
    site.mkdir()
    with pytest.raises(BackendUnavailableError) as info:
        load([site])
    error = info.value
    assert error.backend == "fakevendor"
    assert error.reason == "libfake not found (file names: libfake.so.1)"
    assert error.searched[:3] == ["$ANYDEV_TEST_FAKE_LIBRARY (unset)", f"$ANYDEV_TEST_FAKE_HOME={tmp_path / 'sdk'}",
                                  f"{tmp_path / 'sdk' / 'lib'} (no such directory)"]
    assert f"{site}/{{fakevendor/lib/libfake.so.1}}" in error.searched
    assert error.searched[-1].startswith("dynamic loader path")
    assert "libfake not found" in str(error) and "$ANYDEV_TEST_FAKE_HOME" in str(error)


def test_sdk_root_from_a_compiler_on_path(tmp_path, monkeypatch):
    compiler = tmp_path / "sdk" / "bin" / "fakecc"
    compiler.parent.mkdir(parents=True)
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", f"{compiler.parent}{os.pathsep}{os.environ['PATH']}")
    root, origin = ExecutableRoot("fakecc").resolve()
    assert root == str(tmp_path / "sdk") and str(compiler) in origin
    assert ExecutableRoot("no-such-compiler-anydev").resolve() == (None, "no-such-compiler-anydev on $PATH (not found)")


def test_a_library_without_the_runtime_symbols_makes_the_backend_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYDEV_CUDART_LIBRARY", real_shared_object(tmp_path / "libcudart.so.13"))
    with pytest.raises(BackendUnavailableError) as info:
        Registry(builtin_modules=("anydev.backends.nvidia.plugin",), entry_point_group=None).load("nvidia")
    assert "does not export cudaGetDeviceCount" in info.value.reason


def test_missing_optional_symbol_is_none(tmp_path):
    ffi = ffi_for("mc", "mccl")
    loaded = LoadedLibrary(dlopen(ffi, real_shared_object(tmp_path / "libmcruntime.so")), "libmcruntime.so")
    assert bind_optional(loaded, "mcGetErrorName") is None


# ---- the checker -----------------------------------------------------------------------------
NAMES = {0: "xSuccess", 1: "xErrorInvalidValue", 2: "xErrorMemoryAllocation", 34: "xErrorStubLibrary",
         600: "xErrorNotReady"}
STRINGS = {0: "no error", 1: "invalid argument", 2: "out of memory", 34: "stub library", 600: "device not ready"}


def checker(with_names=True, names=NAMES):
    return Checker("xvendor", "xccl", error_string=lambda c: STRINGS.get(c, "unrecognized error code"),
                   error_name=(lambda c: names.get(c, "unrecognized error code")) if with_names else None,
                   ccl_error_string=lambda c: {4: "invalid argument"}.get(c, "unknown result code"))


def test_runtime_error_carries_backend_call_name_and_message():
    error = checker().runtime_error("xFree(0x10)", 1)
    assert type(error) is RuntimeCallError
    assert (error.backend, error.call, error.code, error.error_name, error.error_message) == (
        "xvendor", "xFree(0x10)", 1, "xErrorInvalidValue", "invalid argument")
    assert str(error) == "xvendor: xFree(0x10) failed with xErrorInvalidValue (1): invalid argument"


def test_allocation_failures_are_out_of_memory_errors():
    assert isinstance(checker().runtime_error("xMalloc", 2), OutOfMemoryError)
    # A runtime without GetErrorName (MACA): code 2 is the allocation failure; the string names it.
    error = checker(with_names=False).runtime_error("xMalloc", 2)
    assert isinstance(error, OutOfMemoryError) and error.error_name == "out of memory"
    assert not isinstance(checker(with_names=False).runtime_error("xFree", 1), OutOfMemoryError)


def test_checker_raises_only_for_nonzero_codes():
    checker().runtime("xSetDevice", 0)
    checker().ccl("xcclAllReduce", 0)
    with pytest.raises(RuntimeCallError, match="xSetDevice failed with xErrorInvalidValue"):
        checker().runtime("xSetDevice", 1)
    with pytest.raises(RuntimeCallError) as info:
        checker().ccl("xcclAllReduce", 4)
    assert (info.value.error_name, info.value.error_message) == ("xcclInvalidArgument", "invalid argument")
    assert not isinstance(info.value, OutOfMemoryError)


def test_not_ready_code_is_resolved_not_assumed():
    assert checker().find_code("ErrorNotReady", "not ready", (600, 34)) == 600
    renumbered = {34: "xErrorNotReady", 600: "xErrorSomethingElse"}
    assert checker(names=renumbered).find_code("ErrorNotReady", "not ready", (600, 34)) == 34
    assert checker(with_names=False).find_code("ErrorNotReady", "not ready", (34, 600)) == 600  # by the string
    assert checker(names={}).find_code("ErrorNotReady", "not ready", (600, 34)) is None


def test_real_libcudart_names_its_errors_and_not_ready(monkeypatch):
    """Against a real CUDA runtime when one is installed (its prototypes, its error names)."""
    from anydev.backends.nvidia.spec import CUDART, SPEC as NVIDIA

    monkeypatch.delenv("ANYDEV_CUDART_LIBRARY", raising=False)
    ffi = ffi_for("cuda", "nccl")
    try:
        loaded = load_library(ffi, CUDART, "nvidia", NVIDIA.sdk_roots, NVIDIA.lib_subdirs)
    except BackendUnavailableError as exc:
        pytest.skip(f"no CUDA runtime here: {exc.reason}")
    real = Checker("nvidia", "nccl", error_string=lambda c: ffi.string(loaded.lib.cudaGetErrorString(c)).decode(),
                   error_name=lambda c: ffi.string(loaded.lib.cudaGetErrorName(c)).decode(),
                   ccl_error_string=str)
    assert real.find_code("ErrorNotReady", "not ready", NVIDIA.runtime.not_ready_candidates) == 600
    oom = real.runtime_error("cudaMalloc", 2)
    assert isinstance(oom, OutOfMemoryError) and oom.error_name == "cudaErrorMemoryAllocation"


def test_nvidia_without_a_usable_gpu_says_why(monkeypatch):
    for var in ("ANYDEV_CUDART_LIBRARY", "ANYDEV_NCCL_LIBRARY"):
        monkeypatch.delenv(var, raising=False)
    registry = Registry(builtin_modules=("anydev.backends.nvidia.plugin",), entry_point_group=None)
    try:
        backend = registry.load("nvidia")
    except BackendUnavailableError as exc:
        message = str(exc)
        assert "libcudart" in message or "libnccl" in message or "cudaGetDeviceCount failed with cudaError" in message
    else:
        assert backend.device_count() >= 1


# ---- cdefs, versions -------------------------------------------------------------------------
@pytest.mark.parametrize("rt,ccl", [("cuda", "nccl"), ("musa", "mccl"), ("mc", "mccl")])
def test_cdefs_render_and_parse_for_each_prefix(rt, ccl):
    text = cdefs.render(rt, ccl)
    assert f"{rt}MemsetAsync(" in text and f"{ccl}AllReduce(" in text and "{" + "rt}" not in text
    ffi = cffi.FFI()
    ffi.cdef(text)
    assert ffi.sizeof(f"{ccl}UniqueId") == 128


def test_version_formatting():
    assert cuda_style_version(13000) == "13.0" and cuda_style_version(12040) == "12.4"
    assert nccl_style_version(22703) == "2.27.3" and nccl_style_version(2708) == "2.7.8"


# ---- torch bridge helpers --------------------------------------------------------------------
def test_cuda_bridge_refuses_when_torch_has_no_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch sees CUDA devices")
    bridge = CudaArrayBridge("metax", "install MetaX's torch build")
    with pytest.raises(NotSupportedError, match="install MetaX's torch build"):
        bridge.tensor_from_pointer(4096, 16, 0, owner=None)
    with pytest.raises(NotSupportedError, match="is_available"):
        bridge.torch_stream(4096, 0)


def test_musa_bridge_without_torch_musa_says_what_to_install():
    pytest.importorskip("torch")
    try:
        import torch_musa  # noqa: F401
        pytest.skip("torch_musa is installed here")
    except ImportError:
        pass
    from anydev.backends.moore.torch_bridge import MusaBridge

    with pytest.raises(NotSupportedError, match="install torch_musa"):
        MusaBridge().torch_device(0)


def test_dlpack_capsule_views_memory_and_releases_its_owner():
    import torch

    from anydev.backends.moore.dlpack import KDL_CPU, byte_capsule

    class Owner:
        pass

    array = np.arange(64, dtype=np.uint8)
    owner = Owner()
    alive = weakref.ref(owner)
    tensor = torch.utils.dlpack.from_dlpack(byte_capsule(array.ctypes.data, 64, KDL_CPU, 0, owner))
    del owner
    assert tensor.data_ptr() == array.ctypes.data and tensor.dtype == torch.uint8
    array[3] = 200
    assert int(tensor[3]) == 200  # a view, not a copy
    assert alive() is not None
    del tensor
    gc.collect()
    assert alive() is None
