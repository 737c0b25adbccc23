"""What differs between the CUDA-like vendors, as data: each vendor folder fills in one VendorSpec.

Defaults are CUDA's and NCCL's numbers [V]. A vendor whose numbers differ overrides them in its own
``spec.py``, so a wrong guess about MUSA or MACA is corrected in one place.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Protocol

from .library import LibrarySpec

#: NCCL's ``ncclDataType_t`` values [V].
NCCL_DTYPES = MappingProxyType({
    "int8": 0, "uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9,
})
#: NCCL's ``ncclRedOp_t`` values [V].
NCCL_REDUCE_OPS = MappingProxyType({"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4})


@dataclass(frozen=True)
class RuntimeConstants:
    """Numeric flags of the runtime API (CUDA's values by default)."""

    #: ``{rt}MemcpyKind`` values indexed by :class:`anydev.plugin_api.CopyKind` (H2H, H2D, D2H, D2D).
    memcpy_kinds: tuple[int, int, int, int] = (0, 1, 2, 3)
    stream_non_blocking: int = 1
    event_default: int = 0
    event_disable_timing: int = 2
    #: Codes that may mean "not ready"; the one the runtime names ``...ErrorNotReady`` is used.
    #: 600 is CUDA ≥ 10.1 and HIP; 34 was CUDA's before 10.1.
    not_ready_candidates: tuple[int, ...] = (600, 34)


@dataclass(frozen=True)
class CollectiveConstants:
    """Enum values of the collective library (NCCL's by default)."""

    dtypes: Mapping[str, int] = field(default_factory=lambda: NCCL_DTYPES)
    reduce_ops: Mapping[str, int] = field(default_factory=lambda: NCCL_REDUCE_OPS)


class TorchBridge(Protocol):
    """The vendor-specific torch glue (see ``cudalike/torch_bridge.py`` and ``moore/torch_bridge.py``)."""

    device_type: str

    def torch_device(self, index: int): ...

    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object): ...

    def torch_stream(self, stream: int, index: int): ...

    def torch_graph(self, stream: int, index: int): ...   # a TorchGraph (contract 1.1)


@dataclass(frozen=True)
class VendorSpec:
    """Everything the CUDA-like core needs to know about one vendor."""

    name: str                       # backend name users type: "nvidia"
    description: str
    rt: str                         # runtime symbol prefix: "cuda"
    ccl: str                        # collective symbol prefix: "nccl"
    ccl_display_name: str           # "NCCL"
    runtime_library: LibrarySpec
    ccl_library: LibrarySpec
    sdk_roots: tuple                # EnvRoot / ExecutableRoot / FixedRoot, in search order
    lib_subdirs: tuple[str, ...]
    hardware_name: str              # "NVIDIA GPU"
    visible_devices_env: str        # named in the "no device" message
    torch_bridge: TorchBridge
    #: ``{rt}DeviceGetAttribute`` ids of compute capability (major, minor), or None to not ask.
    compute_capability_attributes: tuple[int, int] | None = None
    #: ``{rt}DeviceGetAttribute`` ids of the memory clock (kHz) and the memory bus width (bits), for the
    #: peak memory bandwidth the conformance report compares its measurements with; None to not ask.
    memory_peak_attributes: tuple[int, int] | None = None
    #: The shared Triton kernels (contract 1.2) have been checked on this vendor's hardware by the
    #: conformance suite's kernels group; False: offered when its Triton is importable, labelled unverified.
    triton_kernels_verified: bool = False
    #: The vendor's own kernels over the shared Triton ones: called with the Triton kernels' mapping, it
    #: returns that mapping with some entries replaced (nvidia: ``backends/nvidia/kernels.py``); None: the
    #: Triton kernels as they are. The conformance kernels group checks the result like any backend's.
    own_kernels: Callable[[Mapping], Mapping] | None = None
    #: What ``own_kernels`` adds, in the kernels note (``anydev list-backends``).
    own_kernels_note: str = ""
    #: Point-to-point send/recv (contract 1.3: ``{ccl}Send``, ``{ccl}Recv``, ``{ccl}GroupStart``,
    #: ``{ccl}GroupEnd`` with NCCL's prototypes, offered when the library exports all four) has been
    #: checked on this vendor's hardware by the conformance suite's send_recv group; False: labelled
    #: unverified (``runtime_info().notes``, ``anydev list-backends``).
    send_recv_verified: bool = False
    #: Communicator abort (contract 1.4: ``{ccl}CommAbort`` with NCCL's prototype, offered when the
    #: library exports it) has been checked on this vendor's hardware by the conformance suite's
    #: comm_abort group; False: labelled unverified, as ``send_recv_verified``.
    comm_abort_verified: bool = False
    runtime: RuntimeConstants = field(default_factory=RuntimeConstants)
    collectives: CollectiveConstants = field(default_factory=CollectiveConstants)

    @property
    def env_vars(self) -> dict[str, str]:
        """The exact-library environment variables: {library label: variable name}."""
        return {self.runtime_library.label: self.runtime_library.env_var,
                self.ccl_library.label: self.ccl_library.env_var}
