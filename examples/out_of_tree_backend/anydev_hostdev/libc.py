"""The C library this backend "drives", bound through cffi in ABI mode.

A real vendor backend binds its runtime (``libxyzrt.so``) the same way: a ``cdef`` of the
prototypes it calls, one ``dlopen``, and nothing else at import time.
"""
import cffi

CDEF = """
int posix_memalign(void **memptr, size_t alignment, size_t size);
void free(void *ptr);
void *memset(void *s, int c, size_t n);
void *memmove(void *dest, const void *src, size_t n);
"""

ffi = cffi.FFI()
ffi.cdef(CDEF)
libc = ffi.dlopen(None)  # the process's C library


def aligned_alloc(nbytes: int, alignment: int) -> int:
    """``nbytes`` of libc memory aligned to ``alignment``; 0 when libc has no room."""
    out = ffi.new("void **")
    if libc.posix_memalign(out, alignment, max(nbytes, 1)) != 0:
        return 0
    return int(ffi.cast("uintptr_t", out[0]))


def release(address: int) -> None:
    libc.free(ffi.cast("void *", address))


def memset(address: int, value: int, nbytes: int) -> None:
    libc.memset(ffi.cast("void *", address), value, nbytes)


def memmove(dst: int, src: int, nbytes: int) -> None:
    libc.memmove(ffi.cast("void *", dst), ffi.cast("void *", src), nbytes)
