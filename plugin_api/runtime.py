"""The device-API contract: the one class a vendor implements.

A backend is a :class:`DeviceRuntime`: a thin, handle-based wrapper over the vendor runtime and
collective library. Pointers, streams, events and communicators cross this boundary as plain Python
ints (opaque handles; ``0`` is never a valid stream, event or communicator handle). Users never call
a runtime directly: :mod:`anydev.plugin_api.objects` wraps it in devices, buffers, streams, events and
communicators that validate arguments, track ownership and make ``close()`` safe.

Rules every method follows:

* **Errors.** A failing runtime call raises :class:`~anydev.plugin_api.errors.RuntimeCallError`
  (``OutOfMemoryError`` for allocations that do not fit) carrying the backend name, the call name and
  the runtime's own error name and message. Never return an error code; never swallow an error.
* **Current device.** Calls that create something (``malloc``, ``malloc_host``, ``stream_create``,
  ``event_create``, ``comm_init_rank``) and ``memory_info``/``device_synchronize`` act on the calling
  thread's current device, chosen by ``set_device``. The current device is per thread, as in CUDA.
* **Stream order.** ``*_async`` calls and collectives are enqueued on ``stream`` and return without
  waiting. Work on one stream runs in the order it was enqueued; work on different streams is ordered
  only through events (``event_record`` + ``stream_wait_event``).
* **Threads.** A runtime object is shared by all threads of the process; every method must be safe to
  call from several threads at once, each driving its own device and streams.

The torch bridge (:data:`TORCH_BRIDGE_CALLS`: ``torch_device``, ``tensor_from_pointer``,
``torch_stream``) is the one part of the contract that needs torch to know the vendor's device: a
torch device type for its memory (CUDA's ``cuda``, or a vendor's torch port such as ``torch_musa``),
views of device memory as tensors, and torch work on a contract stream. The model, the kernels'
references and the engine's tensors all go through it; the other required calls need no torch.

The backend's name and contract version are declared once, in its
:class:`~anydev.plugin_api.hookspecs.BackendPlugin`; the registry sets them on the runtime it
loads (``name``, ``contract_version``), so a runtime does not declare them (contract 1.6).

Optional calls (added in later minor versions) have a default body that raises
:class:`~anydev.plugin_api.errors.NotSupportedError`; ``supports(name)`` tells whether a runtime
overrides one. The versions:

* 1.0: the required calls (:data:`REQUIRED_CALLS`) and the optional ``runtime_info``.
* 1.1: ``torch_graph`` (device graphs).
* 1.2: ``kernels`` (native device kernels, :mod:`anydev.plugin_api.kernels`).
* 1.3: point-to-point ``send`` and ``recv`` with ``group_start``/``group_end``
  (:data:`POINT_TO_POINT_CALLS`, ``supports("send")``), and the fused kernel ``rotary_write_kv``.
* 1.4: ``comm_abort`` (frees a rank blocked in a collective whose peer failed).
* 1.5: the kernels ``linear`` and ``quantized_linear`` (:mod:`anydev.plugin_api.weight_formats`).
* 1.6: kernels offered for some dtypes and weight formats only
  (:class:`~anydev.plugin_api.kernel_offers.KernelOffer`, read through ``KernelSet.supports``);
  name and contract version declared once, on the plugin (a runtime that still declares them, as
  up to 1.5, must agree with its plugin).
* 1.7: the mixture-of-experts kernels ``moe_route`` and ``moe_linear``.
* 1.8: the fused kernel ``qk_norm_rotary_write_kv`` (per-head q/k RMS norms, rotary and the KV write).
* 1.9: the kernel ``quantized_embedding`` (a quantized table's rows looked up and dequantized).
* 1.10: the kernels ``logprobs`` (each row's log-softmax at its target and its top k, packed) and
  ``moe_combine`` (each token's expert rows, weighted and summed).
* 1.11: the weight format ``q8_0_split`` (Q8_0's codes, then its scales, in each row), which a kernel
  offer takes only by naming it.
* 1.12: the weight format ``q6_k_split`` (Q6_K's low nibbles, top bits, group scales and ``d`` in planes,
  in each row), likewise taken only by an offer that names it.
"""
from __future__ import annotations

import abc
import contextlib
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from .errors import NotSupportedError
from .types import CopyKind, MemoryInfo, RuntimeInfo

if TYPE_CHECKING:
    from .kernel_offers import KernelOffer

#: The torch bridge: the required calls through which torch uses the backend's memory and streams.
TORCH_BRIDGE_CALLS = ("torch_device", "tensor_from_pointer", "torch_stream")
REQUIRED_CALLS = (
    "device_count", "set_device", "get_device", "device_synchronize", "memory_info",
    "malloc", "free", "malloc_host", "free_host", "memset_async", "memcpy_async",
    "stream_create", "stream_synchronize", "stream_wait_event", "stream_destroy",
    "event_create", "event_record", "event_query", "event_synchronize", "event_elapsed_ms",
    "event_destroy",
    "comm_init_all", "comm_unique_id", "comm_init_rank", "comm_destroy",
    "all_reduce", "all_gather", "broadcast",
    *TORCH_BRIDGE_CALLS,
)
#: Point-to-point calls (optional, contract 1.3): a runtime offers all four or none.
POINT_TO_POINT_CALLS = ("send", "recv", "group_start", "group_end")
OPTIONAL_CALLS: tuple[str, ...] = ("runtime_info", "torch_graph", "kernels", *POINT_TO_POINT_CALLS, "comm_abort")


class TorchGraph(abc.ABC):
    """Torch work on one stream, recorded once and replayed many times (from
    :meth:`DeviceRuntime.torch_graph`, contract 1.1): CUDA graphs and their counterparts.

    ``capture()`` records; while it is open nothing it records runs. ``replay()`` runs the recording
    again on the same memory: tensors the recorded work reads are read anew at every replay (copy new
    inputs into them first), tensors it writes are written again. Host code inside the capture (Python,
    shapes, ``if``s) runs once, at capture.
    """

    @abc.abstractmethod
    def capture(self, share_memory_with: "TorchGraph | None" = None) -> contextlib.AbstractContextManager:
        """A context manager: torch kernels, memsets, copies and collectives that the calling thread
        enqueues on the graph's stream inside it are recorded, not run.

        * Other threads are not disturbed: each captures its own graph on its own stream and device
          at the same time (on CUDA: ``capture_error_mode="thread_local"``). The capturing thread must
          not synchronise with the device (no ``.item()``, no host reads of device memory) inside it.
        * Memory torch allocates inside it belongs to the graph's pool and stays reserved until
          ``close()``; ``share_memory_with`` (an earlier captured graph of the same device) makes this
          graph use that graph's pool instead: the two must then never replay at the same time.
        * Collectives called inside it (on the graph's stream) are captured too; every rank of the
          communicator must capture the matching collectives, and replay them together.
        * A graph is captured once; an error inside ends the capture and is raised (the graph is then
          unusable: close it).
        """

    @abc.abstractmethod
    def replay(self) -> None:
        """Enqueue the recorded work on the graph's stream (stream order as any other work)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the graph and its memory pool (the recorded work must have finished)."""


class DeviceRuntime(abc.ABC):
    """A vendor runtime. Subclass it, set the class attributes, implement every abstract method.

    Construction loads the vendor libraries and must raise
    :class:`~anydev.plugin_api.errors.BackendUnavailableError` (saying what was searched) when they
    cannot be loaded; it must not create a device context.
    """

    #: The backend's name, as users type it (``--device NAME``): set by the registry from the
    #: ``BackendPlugin`` when it loads the runtime (a runtime of contract 1.5 or older sets it itself,
    #: to the plugin's name; a runtime may also set it in ``__init__`` for its own messages).
    name: str = ""
    #: The contract version, ``(major, minor)``: set by the registry from the ``BackendPlugin``
    #: (a runtime of contract 1.5 or older declares it; its major must match anydev's).
    contract_version: tuple[int, int] = (0, 0)
    #: The torch device type of this backend's memory (``"cuda"``, ``"musa"``, ``"cpu"``).
    torch_device_type: str = ""
    #: Element types the collectives accept (names from ``anydev.plugin_api.types.DTYPE_SIZES``).
    collective_dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16", "int32")
    #: Reduce ops ``all_reduce`` accepts.
    reduce_ops: tuple[str, ...] = ("sum", "prod", "max", "min", "avg")
    #: Where this runtime runs, for reports: a hardware name, or ``"emulated runtime"``.
    hardware_label: str = "hardware"
    #: Whether ``comm_init_rank`` joins ranks that live in other processes, on this machine or others
    #: (NCCL's and MCCL's do). False for runtimes whose groups are threads of one process (emulated
    #: runtimes, host-only examples): the conformance suite's ``processes`` group then skips, and the
    #: engine's process executors (``executor="mp"``/``"torchrun"``) refuse the backend.
    cross_process_collectives: bool = True
    #: How the kernels from :meth:`kernels` are made, for start-up logs (``"Triton"``,
    #: ``"Triton, unverified on this hardware"``).
    kernels_note: str = ""

    @classmethod
    def supports(cls, call: str) -> bool:
        """True when this runtime implements ``call`` (always true for required calls). The
        point-to-point calls (:data:`POINT_TO_POINT_CALLS`) count only when all four are implemented."""
        if call in REQUIRED_CALLS:
            return True
        if call in POINT_TO_POINT_CALLS:
            return all(cls._overrides(name) for name in POINT_TO_POINT_CALLS)
        return cls._overrides(call)

    @classmethod
    def _overrides(cls, call: str) -> bool:
        impl = getattr(cls, call, None)
        return impl is not None and impl is not getattr(DeviceRuntime, call, None)

    # ---- devices -------------------------------------------------------------------------
    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of devices visible to this process (0 is allowed; never raises for 0)."""

    @abc.abstractmethod
    def set_device(self, index: int) -> None:
        """Make device ``index`` current for the calling thread."""

    @abc.abstractmethod
    def get_device(self) -> int:
        """The calling thread's current device."""

    @abc.abstractmethod
    def device_synchronize(self) -> None:
        """Block until all work on the current device has finished."""

    @abc.abstractmethod
    def memory_info(self) -> MemoryInfo:
        """Free and total bytes of the current device."""

    # ---- memory --------------------------------------------------------------------------
    @abc.abstractmethod
    def malloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` (0 allowed) on the current device; return the address.

        The address is aligned to at least 256 bytes. Raise ``OutOfMemoryError`` when it does not fit.
        A 0-byte allocation may return 0; ``free(0)`` must then succeed.
        """

    @abc.abstractmethod
    def free(self, ptr: int) -> None:
        """Free device memory from ``malloc``. Implicitly synchronising, as in CUDA."""

    @abc.abstractmethod
    def malloc_host(self, nbytes: int) -> int:
        """Allocate page-locked host memory usable by async copies; return its address."""

    @abc.abstractmethod
    def free_host(self, ptr: int) -> None:
        """Free memory from ``malloc_host``."""

    @abc.abstractmethod
    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        """Enqueue: set ``nbytes`` bytes at device address ``ptr`` to the byte ``value``."""

    @abc.abstractmethod
    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: CopyKind, stream: int) -> None:
        """Enqueue a copy of ``nbytes`` from ``src`` to ``dst`` in direction ``kind``.

        Host addresses may be pageable or from ``malloc_host``; the caller keeps them valid until the
        stream has passed the copy.
        """

    # ---- streams -------------------------------------------------------------------------
    @abc.abstractmethod
    def stream_create(self) -> int:
        """Create a stream on the current device that does not synchronise with the legacy default
        stream (CUDA's ``cudaStreamNonBlocking``); return its handle."""

    @abc.abstractmethod
    def stream_synchronize(self, stream: int) -> None:
        """Block until everything enqueued on ``stream`` so far has finished."""

    @abc.abstractmethod
    def stream_wait_event(self, stream: int, event: int) -> None:
        """Make work enqueued on ``stream`` after this call wait for ``event``'s last record."""

    @abc.abstractmethod
    def stream_destroy(self, stream: int) -> None:
        """Destroy a stream; work already enqueued still completes."""

    # ---- events --------------------------------------------------------------------------
    @abc.abstractmethod
    def event_create(self, timing: bool) -> int:
        """Create an event on the current device; ``timing=False`` disables elapsed-time queries."""

    @abc.abstractmethod
    def event_record(self, event: int, stream: int) -> None:
        """Record ``event`` at the current tail of ``stream``."""

    @abc.abstractmethod
    def event_query(self, event: int) -> bool:
        """True when the work before the event's last record has finished (or it was never
        recorded); False when it is still running. Never blocks."""

    @abc.abstractmethod
    def event_synchronize(self, event: int) -> None:
        """Block until the event's last record has completed."""

    @abc.abstractmethod
    def event_elapsed_ms(self, start: int, end: int) -> float:
        """Milliseconds between two completed, timing-enabled events."""

    @abc.abstractmethod
    def event_destroy(self, event: int) -> None:
        """Destroy an event."""

    # ---- collectives ---------------------------------------------------------------------
    @abc.abstractmethod
    def comm_init_all(self, devices: Sequence[int]) -> list[int]:
        """Create one communicator per device for all ranks of this process (rank i on
        ``devices[i]``), for thread-per-rank engines; return their handles in rank order."""

    @abc.abstractmethod
    def comm_unique_id(self) -> bytes:
        """A new unique id for ``comm_init_rank`` (to be sent to every process of the group)."""

    @abc.abstractmethod
    def comm_init_rank(self, unique_id: bytes, nranks: int, rank: int) -> int:
        """Join the group ``unique_id`` as ``rank`` of ``nranks`` on the current device. Blocks
        until all ranks have joined."""

    @abc.abstractmethod
    def comm_destroy(self, comm: int) -> None:
        """Destroy a communicator. It may wait for the other ranks of ``comm`` to destroy theirs
        (NCCL's can, within a node), so every rank destroys its own at the same time: a rank must
        not destroy its communicator and only then tell the others to."""

    @abc.abstractmethod
    def all_reduce(self, send: int, recv: int, count: int, dtype: str, op: str, comm: int, stream: int) -> None:
        """Enqueue: ``recv[i] = op over ranks of send[i]`` for ``count`` elements (``send == recv``
        allowed)."""

    @abc.abstractmethod
    def all_gather(self, send: int, recv: int, count: int, dtype: str, comm: int, stream: int) -> None:
        """Enqueue: ``recv[r*count:(r+1)*count] = send of rank r`` for every rank r."""

    @abc.abstractmethod
    def broadcast(self, send: int, recv: int, count: int, dtype: str, root: int, comm: int, stream: int) -> None:
        """Enqueue: ``recv = send of rank root`` on every rank (``send`` is read on root only)."""

    # ---- torch bridge (TORCH_BRIDGE_CALLS: what a vendor needs a torch port for) ------------
    @abc.abstractmethod
    def torch_device(self, index: int):
        """The ``torch.device`` of device ``index``."""

    @abc.abstractmethod
    def tensor_from_pointer(self, ptr: int, nbytes: int, index: int, owner: object):
        """A 1-D ``torch.uint8`` tensor viewing ``nbytes`` at ``ptr`` on device ``index``, without
        copying. The tensor keeps ``owner`` alive; freeing the memory invalidates the tensor."""

    @abc.abstractmethod
    def torch_stream(self, stream: int, index: int) -> contextlib.AbstractContextManager:
        """A context manager under which torch enqueues its kernels on ``stream``, so that torch math,
        memsets and collectives are ordered on one stream."""

    # ---- optional ------------------------------------------------------------------------
    def runtime_info(self) -> RuntimeInfo:
        """Versions and library paths for ``anydev list-backends`` (optional, contract 1.0)."""
        raise NotSupportedError(f"{self.name} does not report runtime info")

    def torch_graph(self, stream: int, index: int) -> TorchGraph:
        """A new, empty :class:`TorchGraph` capturing torch work on ``stream`` of device ``index``
        (optional, contract 1.1). The calling thread has ``index`` current; the graph is captured,
        replayed and closed by that thread. Backends without device graphs keep this default, and
        engines then run every step eagerly."""
        raise NotSupportedError(
            f"{self.name} does not capture device graphs (torch_graph, optional since contract 1.1); "
            f"run eagerly"
        )

    def kernels(self) -> Mapping[str, "Callable | KernelOffer"]:
        """The device kernels this backend implements natively (optional, contract 1.2): a mapping
        from names of :data:`anydev.plugin_api.kernels.KERNEL_NAMES` to callables with exactly the
        signature, semantics and in-place behaviour of the torch reference of the same name in
        :mod:`anydev.plugin_api.kernels` (whose docstrings are the spec). Offer any subset; the
        engine runs the reference for the rest (``Backend.kernels()`` combines them).

        A bare callable takes every input of its reference. A
        :class:`~anydev.plugin_api.kernel_offers.KernelOffer` (contract 1.6) declares the
        activation dtypes and, for ``quantized_linear``, the weight formats it takes, e.g.
        ``KernelOffer(q4_k_gemm, weight_formats=("q4_k",))``: the engine calls it only on those and
        runs the reference on the rest, on the same device; the suite checks only those. Called once,
        after the backend is loaded; the kernels are called on tensors of this backend's devices,
        on the current torch stream, and must be capturable in :meth:`torch_graph` (except
        ``paged_prefill_attention``). The conformance suite's ``kernels`` group checks each one
        against its reference. Backends without native kernels keep this default."""
        raise NotSupportedError(
            f"{self.name} offers no native kernels (kernels, optional since contract 1.2); the engine "
            f"runs the torch references"
        )

    # ---- optional: point-to-point (contract 1.3) -------------------------------------------
    def send(self, send: int, count: int, dtype: str, peer: int, comm: int, stream: int) -> None:
        """Enqueue: send ``count`` elements of ``dtype`` at device address ``send`` to rank ``peer``
        of ``comm`` (optional, contract 1.3, with :meth:`recv`, :meth:`group_start` and
        :meth:`group_end`: offer all four or none). NCCL's ``ncclSend``.

        What must hold (the conformance suite's ``send_recv`` group checks it):

        * **Matching.** On one communicator, the k-th send from rank a to rank b is received by the
          k-th recv that rank b posts from rank a: messages between a pair arrive in the order sent,
          whatever other pairs do. A send and its recv have the same ``count`` and ``dtype``; a
          mismatch is the caller's error (a backend may fail the stream with it; it must never write
          beyond the recv's ``count`` elements).
        * **Dtypes.** Every dtype of ``collective_dtypes``; the bytes arrive unchanged. ``count`` 0
          is allowed (nothing moves, but the pair still matches). ``peer`` is another rank of the
          communicator, never the caller's own.
        * **Stream order.** As every collective: the send reads its memory after the work enqueued
          before it on ``stream``, and work enqueued after it runs after it. The caller keeps the
          memory valid (and unmodified) until the stream has passed the send.
        * **Blocking and deadlocks.** A send may not complete until its peer has posted the matching
          recv (NCCL's rendezvous), so callers must never rely on buffering: two ranks that each
          send to the other and then receive, on their streams, may deadlock. Sends and recvs that
          must progress at the same time (an exchange, a ring pass) go in one group
          (:meth:`group_start` ... :meth:`group_end`). A chain where each rank only receives from the
          previous one and sends to the next needs no group.
        * **Graphs.** Inside a :meth:`torch_graph` capture on ``stream`` a send is captured like any
          collective, and its peer must capture (and replay) the matching recv.
        """
        raise NotSupportedError(
            f"{self.name} has no point-to-point send/recv (send, optional since contract 1.3); "
            f"pipeline parallelism needs it"
        )

    def recv(self, recv: int, count: int, dtype: str, peer: int, comm: int, stream: int) -> None:
        """Enqueue: receive ``count`` elements of ``dtype`` from rank ``peer`` of ``comm`` into
        device address ``recv``: the next unmatched send from ``peer`` to this rank (optional,
        contract 1.3; NCCL's ``ncclRecv``). Every rule of :meth:`send` applies: in-order matching per
        pair, same count and dtype as the send, stream order (work enqueued after the recv sees the
        received data), and a recv may wait on its stream until the peer's send arrives."""
        raise NotSupportedError(
            f"{self.name} has no point-to-point send/recv (recv, optional since contract 1.3); "
            f"pipeline parallelism needs it"
        )

    def group_start(self) -> None:
        """Open a group of point-to-point calls on the calling thread (optional, contract 1.3;
        NCCL's ``ncclGroupStart``). The sends and recvs this thread calls until the matching
        :meth:`group_end` are issued together at ``group_end`` and progress together: no call of the
        group waits for another of the same group, so a rank may send to and receive from the same
        peers in one group without deadlock. Groups nest; the outermost ``group_end`` issues them.
        Only ``send`` and ``recv`` may be called inside a group."""
        raise NotSupportedError(f"{self.name} has no point-to-point groups (group_start, optional since contract 1.3)")

    def group_end(self) -> None:
        """Close the calling thread's innermost group (see :meth:`group_start`); the outermost one
        enqueues the group's calls, each on the stream it names, in the order they were called."""
        raise NotSupportedError(f"{self.name} has no point-to-point groups (group_end, optional since contract 1.3)")

    # ---- optional: communicator abort (contract 1.4) ---------------------------------------
    def comm_abort(self, comm: int) -> None:
        """Abort communicator ``comm`` (optional, contract 1.4; NCCL's ``ncclCommAbort``): the way to
        free a rank blocked in a collective whose peer died, hung or failed before joining it.

        What must hold (the conformance suite's ``comm_abort`` group checks it):

        * **Any thread, any time.** Callable from any thread, including while another thread is
          blocked in ``stream_synchronize``/``event_synchronize`` on a stream that holds ``comm``'s
          work, and while that work waits for peers that will never come. It must not wait for
          their work; it may wait for the other ranks of ``comm`` on the same node to abort theirs
          too (NCCL's can: the node's ranks free shared memory together), so callers abort every rank's
          communicator of a broken group at once, each on its own thread (the engine does).
        * **Work ends.** Every collective, send and recv of ``comm`` enqueued or running ends
          promptly, its results undefined (a backend may leave the output untouched or partly
          written). Stream and event syncs that waited on that work return, or raise a typed error
          (e.g. :class:`~anydev.plugin_api.errors.CollectiveAbortedError`), instead of hanging.
          Other communicators of the group may end too (an in-process group may end for all its
          ranks); the peers' own communicators are theirs to abort.
        * **Afterwards.** Any later call naming ``comm`` (collectives, send, recv) raises a typed
          error; only ``comm_destroy(comm)`` is allowed, and releases whatever is left (with NCCL,
          whose abort frees the communicator, nothing: the backend must not call ncclCommDestroy on
          it). Aborting twice is the caller's error; :meth:`Communicator.abort` calls this once.

        Backends without it keep this default; the engine then cannot free a rank thread blocked on
        a dead peer (it stops its rank processes instead)."""
        raise NotSupportedError(
            f"{self.name} cannot abort a communicator (comm_abort, optional since contract 1.4); a rank "
            f"blocked in a collective with a failed peer stays blocked"
        )

    def close(self) -> None:
        """Release process-wide resources (optional to override). Called once by the Backend."""
