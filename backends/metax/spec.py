"""MetaX: the MACA runtime (prefix ``mc``) + MCCL.

Confidence (docs/vendor-runtimes.md): names, libraries and roots are [U] (from public code that calls
the API); numeric flags are assumed equal to CUDA's [I] (vendor ctypes code passes CUDA's memcpy kinds).
MACA is not known to export ``mcGetErrorName`` or ``mcRuntimeGetVersion``: the core treats both as
optional. Device attribute ids are HIP-style, not CUDA's, so no attribute is queried.
"""
from anydev.backends.cudalike.library import EnvRoot, FixedRoot, LibrarySpec
from anydev.backends.cudalike.spec import VendorSpec
from anydev.backends.cudalike.torch_bridge import CudaArrayBridge

MCRUNTIME = LibrarySpec(label="libmcruntime", env_var="ANYDEV_MCRUNTIME_LIBRARY", file_names=("libmcruntime.so",))
MCCL = LibrarySpec(label="libmccl", env_var="ANYDEV_MACA_MCCL_LIBRARY", file_names=("libmccl.so",))

SPEC = VendorSpec(
    name="metax",
    description="MetaX GPUs through the MACA runtime and MCCL",
    rt="mc",
    ccl="mccl",
    ccl_display_name="MCCL (MetaX)",
    runtime_library=MCRUNTIME,
    ccl_library=MCCL,
    sdk_roots=(EnvRoot("MACA_PATH"), EnvRoot("MACA_HOME"), EnvRoot("MACA_ROOT"), FixedRoot("/opt/maca")),
    lib_subdirs=("lib", "lib64"),
    hardware_name="MetaX GPU",
    visible_devices_env="CUDA_VISIBLE_DEVICES",
    # MetaX ships its own torch build whose device type is "cuda" [U].
    torch_bridge=CudaArrayBridge("metax", "install MetaX's torch build for MACA (its device type is 'cuda')"),
    # mcclSend/mcclRecv/mcclGroupStart/mcclGroupEnd: NCCL's prototypes with the prefix swapped [U];
    # bound when libmccl exports them, labelled unverified until the send_recv group runs on the card.
    send_recv_verified=False,
    # mcclCommAbort: NCCL's ncclCommAbort with the prefix swapped [U]; bound when libmccl exports it,
    # labelled unverified until the comm_abort group runs on the card.
    comm_abort_verified=False,
)
