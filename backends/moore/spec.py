"""Moore Threads: the MUSA runtime (prefix ``musa``) + MCCL.

Confidence (docs/vendor-runtimes.md): names, libraries and roots are [U] (from public code that calls
the API); numeric flags (memcpy kinds, stream and event flags) are assumed equal to CUDA's [I]; the
"not ready" code is resolved at load time. Device attribute ids are unverified, so none is queried.
"""
from anydev.backends.cudalike.library import EnvRoot, ExecutableRoot, FixedRoot, LibrarySpec
from anydev.backends.cudalike.spec import VendorSpec

from .torch_bridge import MusaBridge

MUSART = LibrarySpec(
    label="libmusart", env_var="ANYDEV_MUSART_LIBRARY",
    file_names=("libmusart.so", "libmusart.so.5", "libmusart.so.4"),
)
MCCL = LibrarySpec(label="libmccl", env_var="ANYDEV_MUSA_MCCL_LIBRARY", file_names=("libmccl.so", "libmccl.so.2"))

SPEC = VendorSpec(
    name="moore",
    description="Moore Threads GPUs through the MUSA runtime and MCCL",
    rt="musa",
    ccl="mccl",
    ccl_display_name="MCCL (Moore Threads)",
    runtime_library=MUSART,
    ccl_library=MCCL,
    sdk_roots=(EnvRoot("MUSA_HOME"), EnvRoot("MUSA_PATH"), ExecutableRoot("mcc"), FixedRoot("/usr/local/musa")),
    lib_subdirs=("lib",),
    hardware_name="Moore Threads GPU",
    visible_devices_env="MUSA_VISIBLE_DEVICES",
    torch_bridge=MusaBridge(),
    # mcclSend/mcclRecv/mcclGroupStart/mcclGroupEnd: NCCL's prototypes with the prefix swapped [U];
    # bound when libmccl exports them, labelled unverified until the send_recv group runs on the card.
    send_recv_verified=False,
    # mcclCommAbort: NCCL's ncclCommAbort with the prefix swapped [U]; bound when libmccl exports it,
    # labelled unverified until the comm_abort group runs on the card.
    comm_abort_verified=False,
)
