"""A DLPack capsule over raw memory, so torch can view memory it did not allocate, on any device type.

``byte_capsule(ptr, nbytes, device_type, device_id, owner)`` describes ``nbytes`` uint8 at ``ptr``;
``torch.utils.dlpack.from_dlpack`` consumes it without copying and calls the deleter when the tensor
dies, which releases ``owner``.
"""
from __future__ import annotations

import ctypes
import threading

import cffi

#: DLPack device types (dlpack.h).
KDL_CPU = 1
KDL_EXT_DEV = 12

_ffi = cffi.FFI()
_ffi.cdef("""
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    uintptr_t data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
""")
_DL_UINT = 1

# Live capsules: id → (managed tensor, shape array, owner); the deleter drops the entry.
_live: dict[int, tuple] = {}
_next_id = iter(range(1, 1 << 62))
_id_lock = threading.Lock()


@_ffi.callback("void(DLManagedTensor *)")
def _deleter(managed) -> None:
    _live.pop(int(_ffi.cast("intptr_t", managed.manager_ctx)), None)


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def byte_capsule(ptr: int, nbytes: int, device_type: int, device_id: int, owner: object):
    """A "dltensor" PyCapsule describing a 1-D uint8 array of ``nbytes`` at ``ptr``."""
    with _id_lock:
        key = next(_next_id)
    managed = _ffi.new("DLManagedTensor *")
    shape = _ffi.new("int64_t[1]", [nbytes])
    tensor = managed.dl_tensor
    tensor.data = ptr
    tensor.device.device_type = device_type
    tensor.device.device_id = device_id
    tensor.ndim = 1
    tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = _DL_UINT, 8, 1
    tensor.shape = shape
    managed.manager_ctx = _ffi.cast("void *", key)
    managed.deleter = _deleter
    _live[key] = (managed, shape, owner)
    return _capsule_new(int(_ffi.cast("uintptr_t", managed)), b"dltensor", None)
