"""C declarations of the CUDA-like runtime and NCCL-like collective library, for cffi ABI mode.

The text is a ``str.format`` template: ``{rt}`` becomes the runtime's symbol prefix (``cuda``, ``musa``, ``mc``) and
``{ccl}`` the collective library's (``nccl``, ``mccl``). Prototypes follow CUDA 12/13 and NCCL 2.2x
(see docs/vendor-runtimes.md); MUSA and MACA are assumed to mirror them.

One deliberate departure from the headers: addresses and opaque handles (``void *``, ``cudaStream_t``,
``cudaEvent_t``, ``ncclComm_t``) are declared as ``uintptr_t``. On the 64-bit ABIs we support both are
passed in the same integer registers, and it lets Python ints cross the boundary without an
``ffi.cast`` per call, which keeps the hot path (event record, async memset) close to a bare call.
"""
from __future__ import annotations

RUNTIME_CDEF = """
typedef int {rt}Error_t;
{rt}Error_t {rt}GetDeviceCount(int *count);
{rt}Error_t {rt}SetDevice(int device);
{rt}Error_t {rt}GetDevice(int *device);
{rt}Error_t {rt}DeviceSynchronize(void);
{rt}Error_t {rt}DeviceGetAttribute(int *value, int attr, int device);
{rt}Error_t {rt}MemGetInfo(size_t *free, size_t *total);
{rt}Error_t {rt}Malloc(uintptr_t *ptr, size_t size);
{rt}Error_t {rt}Free(uintptr_t ptr);
{rt}Error_t {rt}MallocHost(uintptr_t *ptr, size_t size);
{rt}Error_t {rt}FreeHost(uintptr_t ptr);
{rt}Error_t {rt}MemsetAsync(uintptr_t ptr, int value, size_t count, uintptr_t stream);
{rt}Error_t {rt}MemcpyAsync(uintptr_t dst, uintptr_t src, size_t count, int kind, uintptr_t stream);
{rt}Error_t {rt}StreamCreateWithFlags(uintptr_t *stream, unsigned int flags);
{rt}Error_t {rt}StreamSynchronize(uintptr_t stream);
{rt}Error_t {rt}StreamWaitEvent(uintptr_t stream, uintptr_t event, unsigned int flags);
{rt}Error_t {rt}StreamDestroy(uintptr_t stream);
{rt}Error_t {rt}EventCreateWithFlags(uintptr_t *event, unsigned int flags);
{rt}Error_t {rt}EventRecord(uintptr_t event, uintptr_t stream);
{rt}Error_t {rt}EventQuery(uintptr_t event);
{rt}Error_t {rt}EventSynchronize(uintptr_t event);
{rt}Error_t {rt}EventElapsedTime(float *ms, uintptr_t start, uintptr_t end);
{rt}Error_t {rt}EventDestroy(uintptr_t event);
const char *{rt}GetErrorString({rt}Error_t error);
/* Optional: MACA is not known to export these two. */
const char *{rt}GetErrorName({rt}Error_t error);
{rt}Error_t {rt}RuntimeGetVersion(int *version);
{rt}Error_t {rt}DriverGetVersion(int *version);
"""

CCL_CDEF = """
typedef int {ccl}Result_t;
typedef struct {{ char internal[128]; }} {ccl}UniqueId;
{ccl}Result_t {ccl}GetVersion(int *version);
{ccl}Result_t {ccl}GetUniqueId({ccl}UniqueId *uniqueId);
{ccl}Result_t {ccl}CommInitRank(uintptr_t *comm, int nranks, {ccl}UniqueId commId, int rank);
{ccl}Result_t {ccl}CommInitAll(uintptr_t *comms, int ndev, const int *devlist);
{ccl}Result_t {ccl}CommDestroy(uintptr_t comm);
const char *{ccl}GetErrorString({ccl}Result_t result);
{ccl}Result_t {ccl}AllReduce(uintptr_t sendbuff, uintptr_t recvbuff, size_t count, int datatype,
                             int op, uintptr_t comm, uintptr_t stream);
{ccl}Result_t {ccl}AllGather(uintptr_t sendbuff, uintptr_t recvbuff, size_t sendcount, int datatype,
                             uintptr_t comm, uintptr_t stream);
{ccl}Result_t {ccl}Broadcast(uintptr_t sendbuff, uintptr_t recvbuff, size_t count, int datatype,
                             int root, uintptr_t comm, uintptr_t stream);
"""

#: Point-to-point calls (contract 1.3's send/recv), bound only when the library exports all four:
#: NCCL 2.7+ [V]; MCCL's are NCCL's with the prefix swapped [U] (see each vendor's spec.py).
CCL_POINT_TO_POINT_CDEF = """
{ccl}Result_t {ccl}Send(uintptr_t sendbuff, size_t count, int datatype, int peer, uintptr_t comm, uintptr_t stream);
{ccl}Result_t {ccl}Recv(uintptr_t recvbuff, size_t count, int datatype, int peer, uintptr_t comm, uintptr_t stream);
{ccl}Result_t {ccl}GroupStart(void);
{ccl}Result_t {ccl}GroupEnd(void);
"""

#: Communicator abort (contract 1.4's comm_abort), bound only when the library exports it: NCCL 2.4+
#: [V]; MCCL's is NCCL's with the prefix swapped [U] (see each vendor's spec.py).
CCL_ABORT_CDEF = """
{ccl}Result_t {ccl}CommAbort(uintptr_t comm);
"""


def render(rt: str, ccl: str) -> str:
    """The cdef text for runtime prefix ``rt`` and collective prefix ``ccl``."""
    return (RUNTIME_CDEF + CCL_CDEF + CCL_POINT_TO_POINT_CDEF + CCL_ABORT_CDEF).format(rt=rt, ccl=ccl)
