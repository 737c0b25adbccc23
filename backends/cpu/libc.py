"""The C library calls the cpu backend uses, through cffi in ABI mode (no compiler needed)."""
from __future__ import annotations

import ctypes.util
import functools

import cffi
import torch

from ...plugin_api.errors import BackendUnavailableError

ffi = cffi.FFI()
ffi.cdef("""
int posix_memalign(void **memptr, size_t alignment, size_t size);
void free(void *ptr);
void *memset(void *s, int c, size_t n);
void *memcpy(void *dest, const void *src, size_t n);
""")


@functools.cache
def load_libc():
    """``(lib, name)``: the C library, opened once per process.

    ``find_library("c")`` names it where the platform can (``libc.so.6`` on glibc); otherwise
    ``dlopen(NULL)`` gives the symbols already loaded into the process, which include libc.
    """
    name = ctypes.util.find_library("c")
    try:
        return ffi.dlopen(name), name or "the process's own symbols (dlopen(NULL))"
    except OSError as exc:
        raise BackendUnavailableError("cpu", f"cannot open the C library: {exc}", [name or "dlopen(NULL)"]) from None


def pointer(address: int):
    """``address`` as a ``void *`` for libc calls."""
    return ffi.cast("void *", address)


def byte_view(address: int, nbytes: int) -> torch.Tensor:
    """A uint8 tensor over ``nbytes`` at ``address``, for internal use while the memory is known alive."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(ffi.buffer(ffi.cast("char *", address), nbytes), dtype=torch.uint8)
