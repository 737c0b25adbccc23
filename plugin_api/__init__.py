"""anydev's device-API contract, version :data:`CONTRACT_VERSION`.

* :class:`DeviceRuntime` (``runtime.py``) is what a vendor implements; its docstrings are the spec.
* :mod:`.objects` wraps a runtime in the objects users hold (Backend, Device, DeviceBuffer,
  HostBuffer, Stream, Event, Communicator).
* :mod:`.kernels` names the optional device kernels (contract 1.2), with their torch references
  (import it as ``anydev.plugin_api.kernels``; it imports torch, the rest of the contract does not);
  :class:`KernelOffer` (:mod:`.kernel_offers`, 1.6) declares the dtypes and weight formats a native
  kernel takes.
* :mod:`.hookspecs` is the pluggy hook every backend plugin implements; :mod:`.discovery` finds them.
"""
from .discovery import Registry, get_registry, load_backend
from .errors import (
    AnydevError, BackendUnavailableError, ClosedError, CollectiveAbortedError, CollectiveTimeoutError,
    ContractVersionError,
    InvalidArgumentError, NotSupportedError, OutOfMemoryError, PluginError, RuntimeCallError,
    UnknownBackendError,
)
from .hookspecs import ENTRY_POINT_GROUP, BackendPlugin, hookimpl
from .kernel_offers import ACTIVATION_DTYPES, KernelOffer
from .objects import Backend, Communicator, Device, DeviceBuffer, Event, Graph, HostBuffer, Stream
from .runtime import (
    OPTIONAL_CALLS, POINT_TO_POINT_CALLS, REQUIRED_CALLS, TORCH_BRIDGE_CALLS, DeviceRuntime, TorchGraph,
)
from .stub import is_stub, stub
from .types import (
    DTYPE_SIZES, REDUCE_OPS, REQUIRED_COLLECTIVE_DTYPES, REQUIRED_REDUCE_OPS, CopyKind, MemoryInfo,
    RuntimeInfo, dtype_name,
)
from .version import CONTRACT_VERSION, check_compatible
