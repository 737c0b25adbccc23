"""CUDA C to a cubin at run time with NVRTC (cffi, ABI mode): what lets the nvidia backend ship kernels
of its own as source, on machines with no CUDA toolkit (torch's CUDA wheels bring libnvrtc)."""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import warnings
from pathlib import Path

from cffi import FFI

from anydev.backends.cudalike.library import LibrarySpec, load_library
from anydev.backends.nvidia.sdk import LIB_SUBDIRS, SDK_ROOTS
from anydev.plugin_api.errors import RuntimeCallError

NVRTC = LibrarySpec(
    label="libnvrtc",
    env_var="ANYDEV_NVRTC_LIBRARY",
    file_names=("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"),
    pip_paths=("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"),
)

CDEFS = """
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
                               const char * const *headers, const char * const *includeNames);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
"""


@functools.lru_cache(maxsize=None)
def _nvrtc():
    ffi = FFI()
    ffi.cdef(CDEFS)
    return ffi, load_library(ffi, NVRTC, "nvidia", SDK_ROOTS, LIB_SUBDIRS).lib


def _check(ffi, lib, status: int, call: str, log: str = "") -> None:
    if status != 0:
        message = ffi.string(lib.nvrtcGetErrorString(status)).decode()
        raise RuntimeCallError("nvidia", call, status, message, log or "see the NVRTC documentation")


def compile_cubin(source: str, name: str, arch: int, options: tuple[str, ...] = ()) -> bytes:
    """``source`` compiled for ``sm_{arch}`` (e.g. 90) to a cubin (NVRTC optimizes by default; ``options``
    are added to the architecture). RuntimeCallError with the compiler's log when it fails;
    BackendUnavailableError (naming what was searched) when libnvrtc is not found."""
    ffi, lib = _nvrtc()
    program = ffi.new("nvrtcProgram *")
    _check(ffi, lib, lib.nvrtcCreateProgram(program, source.encode(), name.encode(), 0, ffi.NULL, ffi.NULL),
           "nvrtcCreateProgram")
    try:
        flags = [ffi.new("char[]", o.encode()) for o in (f"--gpu-architecture=sm_{arch}", *options)]
        status = lib.nvrtcCompileProgram(program[0], len(flags), ffi.new("char *[]", flags))
        if status != 0:
            size = ffi.new("size_t *")
            lib.nvrtcGetProgramLogSize(program[0], size)
            log = ffi.new("char[]", size[0])
            lib.nvrtcGetProgramLog(program[0], log)
            _check(ffi, lib, status, f"nvrtcCompileProgram ({name}, sm_{arch})", ffi.string(log).decode())
        size = ffi.new("size_t *")
        _check(ffi, lib, lib.nvrtcGetCUBINSize(program[0], size), "nvrtcGetCUBINSize")
        cubin = ffi.new("char[]", size[0])
        _check(ffi, lib, lib.nvrtcGetCUBIN(program[0], cubin), "nvrtcGetCUBIN")
        return bytes(ffi.buffer(cubin, size[0]))
    finally:
        lib.nvrtcDestroyProgram(program)


def nvrtc_version() -> tuple[int, int]:
    ffi, lib = _nvrtc()
    major, minor = ffi.new("int *"), ffi.new("int *")
    _check(ffi, lib, lib.nvrtcVersion(major, minor), "nvrtcVersion")
    return major[0], minor[0]


def cache_dir() -> Path:
    """Where compiled cubins are kept: ``$XDG_CACHE_HOME/anydev/nvrtc`` (default ``~/.cache/...``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "anydev" / "nvrtc"


def cached_cubin(source: str, name: str, arch: int) -> bytes:
    """:func:`compile_cubin`'s cubin, kept in :func:`cache_dir` under a hash of the source, the
    architecture and NVRTC's version, so that a process after the first loads it instead of compiling
    (NVRTC takes most of a second for gemv.cu). Written whole or not at all (a file renamed into place);
    a cache that cannot be written is a RuntimeWarning, the cubin still returned."""
    key = hashlib.sha256(f"{source}\0{name}\0sm_{arch}\0{nvrtc_version()}".encode()).hexdigest()
    path = cache_dir() / f"{key}.cubin"
    if path.is_file():
        return path.read_bytes()
    cubin = compile_cubin(source, name, arch)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as part:
            part.write(cubin)
        os.replace(part.name, path)
    except OSError as error:        # a read-only cache costs the next process a compile, not this one its run
        warnings.warn(f"the compiled {name} could not be kept in {path.parent} ({error}); set XDG_CACHE_HOME "
                      "to a writable folder, or each process compiles it again", RuntimeWarning, stacklevel=2)
    return cubin
