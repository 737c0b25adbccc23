"""A cubin's kernels loaded and launched through the CUDA driver API (libcuda, cffi ABI mode): modules
per device, launches on a torch stream (so that they are captured into device graphs like any other),
with programmatic dependent launch when asked."""
from __future__ import annotations

import functools

from cffi import FFI

from anydev.backends.cudalike.library import LibrarySpec, load_library
from anydev.plugin_api.errors import RuntimeCallError

LIBCUDA = LibrarySpec(label="libcuda", env_var="ANYDEV_LIBCUDA_LIBRARY", file_names=("libcuda.so.1", "libcuda.so"))

#: cuda.h's CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
PROGRAMMATIC_STREAM_SERIALIZATION = 6

CDEFS = """
typedef int CUresult;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct {
    unsigned int id;
    char pad[4];
    union { char pad[64]; int programmaticStreamSerializationAllowed; void *align; } value;
} CUlaunchAttribute;
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
"""


@functools.lru_cache(maxsize=None)
def driver():
    """(ffi, libcuda)."""
    ffi = FFI()
    ffi.cdef(CDEFS)
    return ffi, load_library(ffi, LIBCUDA, "nvidia").lib


def check(status: int, call: str) -> None:
    if status != 0:
        ffi, lib = driver()
        name, text = ffi.new("const char **"), ffi.new("const char **")
        lib.cuGetErrorName(status, name)
        lib.cuGetErrorString(status, text)
        raise RuntimeCallError("nvidia", call, status, ffi.string(name[0]).decode() if name[0] else "?",
                               ffi.string(text[0]).decode() if text[0] else "unknown CUresult")


class Module:
    """A cubin loaded into the current context (the caller makes the device's primary context current,
    e.g. under ``torch.cuda.device``) and its named kernels."""

    def __init__(self, cubin: bytes, names: list[str]):
        ffi, lib = driver()
        self._image = ffi.from_buffer(cubin)
        module = ffi.new("CUmodule *")
        check(lib.cuModuleLoadData(module, self._image), "cuModuleLoadData")
        self.functions = {}
        for name in names:
            function = ffi.new("CUfunction *")
            check(lib.cuModuleGetFunction(function, module[0], name.encode()), f"cuModuleGetFunction({name})")
            self.functions[name] = function[0]

    def launch(self, name: str, grid: int, block: int, shared_bytes: int, stream: int, args: list,
               programmatic: bool) -> None:
        """Kernel ``name`` on ``grid`` x ``block`` threads; ``args``: (C type, value) pairs in the kernel's
        parameter order; ``programmatic``: the launch may start before the kernel before it ends (the
        kernel waits for it with ``griddepcontrol.wait``)."""
        ffi, lib = driver()
        params = [ffi.new(f"{ctype} *", value) for ctype, value in args]
        config = ffi.new("CUlaunchConfig *")
        config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
        config.sharedMemBytes = shared_bytes
        config.hStream = ffi.cast("CUstream", stream)
        if programmatic:
            attribute = ffi.new("CUlaunchAttribute *")
            attribute.id = PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            config.attrs, config.numAttrs = attribute, 1
        check(lib.cuLaunchKernelEx(config, self.functions[name], ffi.new("void *[]", params), ffi.NULL),
              f"cuLaunchKernelEx({name})")
