"""NVIDIA: the CUDA runtime (12 or 13) + NCCL. Every fact here is verified [V] (docs/vendor-runtimes.md)."""
from anydev.backends.cudalike.library import LibrarySpec
from anydev.backends.cudalike.spec import VendorSpec
from anydev.backends.cudalike.torch_bridge import CudaArrayBridge

from .kernels import NOTE, own_kernels
from .sdk import LIB_SUBDIRS, SDK_ROOTS

CUDART = LibrarySpec(
    label="libcudart",
    env_var="ANYDEV_CUDART_LIBRARY",
    file_names=("libcudart.so.13", "libcudart.so.12", "libcudart.so"),
    pip_paths=("nvidia/cu13/lib/libcudart.so.13", "nvidia/cuda_runtime/lib/libcudart.so.12"),
)
NCCL = LibrarySpec(
    label="libnccl",
    env_var="ANYDEV_NCCL_LIBRARY",
    file_names=("libnccl.so.2", "libnccl.so"),
    pip_paths=("nvidia/nccl/lib/libnccl.so.2",),
)

SPEC = VendorSpec(
    name="nvidia",
    description="NVIDIA GPUs through the CUDA runtime and NCCL",
    rt="cuda",
    ccl="nccl",
    ccl_display_name="NCCL",
    runtime_library=CUDART,
    ccl_library=NCCL,
    sdk_roots=SDK_ROOTS,
    lib_subdirs=LIB_SUBDIRS,
    hardware_name="NVIDIA GPU",
    visible_devices_env="CUDA_VISIBLE_DEVICES",
    torch_bridge=CudaArrayBridge("nvidia", "install a CUDA build of torch (e.g. pip install torch from the cu130 index)"),
    compute_capability_attributes=(75, 76),  # cudaDevAttrComputeCapabilityMajor / Minor
    memory_peak_attributes=(36, 37),         # cudaDevAttrMemoryClockRate (kHz) / GlobalMemoryBusWidth (bits)
    triton_kernels_verified=True,   # the conformance kernels group has passed on NVIDIA hardware
    own_kernels=own_kernels,
    own_kernels_note=NOTE,
    # ncclSend/ncclRecv/ncclGroupStart/ncclGroupEnd: prototypes [V] (docs/vendor-runtimes.md); True
    # once the conformance send_recv group passes on NVIDIA hardware (benchmarks/gpu_record.sh, STEPS=pp).
    send_recv_verified=False,
    # ncclCommAbort: prototype [V] (docs/vendor-runtimes.md); True once the conformance comm_abort
    # group passes on NVIDIA hardware (benchmarks/gpu_record.sh).
    comm_abort_verified=False,
)
