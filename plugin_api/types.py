"""Small value types shared by the contract: dtypes, reduce ops, copy kinds, memory and runtime info."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .errors import InvalidArgumentError

# Element types of the collectives, by name, with their size in bytes. The contract requires
# float32, float16, bfloat16 and int32; the others are optional (a backend lists what it has in
# ``DeviceRuntime.collective_dtypes``).
DTYPE_SIZES: dict[str, int] = {
    "float32": 4, "float16": 2, "bfloat16": 2, "int32": 4,
    "float64": 8, "int64": 8, "int8": 1, "uint8": 1,
}
REQUIRED_COLLECTIVE_DTYPES = ("float32", "float16", "bfloat16", "int32")
REDUCE_OPS = ("sum", "prod", "max", "min", "avg")
REQUIRED_REDUCE_OPS = ("sum", "max", "min")


def dtype_name(dtype) -> str:
    """Normalise a dtype given as a name, a torch.dtype or a numpy dtype to one of ``DTYPE_SIZES``."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPE_SIZES:
        raise InvalidArgumentError(
            f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPE_SIZES)}"
        )
    return name


class CopyKind(enum.IntEnum):
    """Direction of a copy. The values equal CUDA's ``cudaMemcpyKind`` (MUSA and MACA mirror them)."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3


@dataclass(frozen=True)
class MemoryInfo:
    """Free and total bytes of one device, as the runtime reports them."""

    free: int
    total: int


@dataclass
class RuntimeInfo:
    """What ``anydev list-backends`` prints about an available backend."""

    runtime_version: str = "unknown"
    driver_version: str = "unknown"
    collective_library: str = "none"
    collective_version: str = "unknown"
    library_paths: list[str] = field(default_factory=list)
    notes: str = ""
