"""Communicator: one rank of a collective group, bound to one device."""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

from ..errors import CollectiveAbortedError, InvalidArgumentError, NotSupportedError
from ..types import DTYPE_SIZES, dtype_name
from .closable import Closable
from .memory import DeviceBuffer

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream


class Communicator(Closable):
    """One rank of a collective group, bound to one device.

    Collectives take device memory as a DeviceBuffer (then ``count`` and ``dtype`` are required) or a
    contiguous torch tensor on this device (count and dtype come from it). ``recv`` defaults to
    ``send`` (in place where the op allows). They are enqueued on ``stream``.

    :meth:`abort` (contract 1.4) ends its collectives at once from any thread, e.g. when a peer died.
    """

    def __init__(self, device: Device, handle: int, rank: int, nranks: int):
        self.device = device
        self.runtime = device.runtime
        self.handle = handle
        self.rank = rank
        self.nranks = nranks
        self._what = f"communicator rank {rank}/{nranks} on {device}"
        self._aborted = False
        self._abort_lock = threading.Lock()   # abort and destroy never overlap

    @classmethod
    def from_unique_id(cls, device: Device, unique_id: bytes, nranks: int, rank: int) -> "Communicator":
        """Join a multi-process group (every process passes the same ``unique_id``)."""
        if not 0 <= rank < nranks:
            raise InvalidArgumentError(f"rank {rank} is outside 0..{nranks - 1}")
        device.set_current()
        return cls(device, device.runtime.comm_init_rank(unique_id, nranks, rank), rank, nranks)

    def all_reduce(self, send, recv=None, *, op: str = "sum", stream: Stream, count=None, dtype=None) -> None:
        if op not in self.runtime.reduce_ops:
            raise InvalidArgumentError(f"{self.runtime.name}: reduce op {op!r} not supported; use one of {self.runtime.reduce_ops}")
        send_ptr, n, dt = self._span(send, count, dtype)
        recv_ptr, _, _ = self._span(send if recv is None else recv, n, dt)
        self.runtime.all_reduce(send_ptr, recv_ptr, n, dt, op, self.handle, self._stream(stream, send, recv))

    def all_gather(self, send, recv, *, stream: Stream, count=None, dtype=None) -> None:
        """``count`` is the element count each rank sends; ``recv`` holds ``nranks * count``."""
        send_ptr, n, dt = self._span(send, count, dtype)
        recv_ptr, _, _ = self._span(recv, n * self.nranks, dt)
        self.runtime.all_gather(send_ptr, recv_ptr, n, dt, self.handle, self._stream(stream, send, recv))

    def broadcast(self, send, recv=None, *, root: int = 0, stream: Stream, count=None, dtype=None) -> None:
        if not 0 <= root < self.nranks:
            raise InvalidArgumentError(f"broadcast root {root} is outside 0..{self.nranks - 1}")
        send_ptr, n, dt = self._span(send, count, dtype)
        recv_ptr, _, _ = self._span(send if recv is None else recv, n, dt)
        self.runtime.broadcast(send_ptr, recv_ptr, n, dt, root, self.handle, self._stream(stream, send, recv))

    # ---- point-to-point (optional, contract 1.3; ``backend.supports("send")`` tells) ----------
    def send(self, tensor, peer: int, *, stream: Stream, count=None, dtype=None) -> None:
        """Send ``tensor`` (or ``count`` elements of ``dtype`` of a DeviceBuffer) to rank ``peer``,
        in ``stream`` order. The peer receives it with :meth:`recv` of the same count and dtype;
        messages between two ranks arrive in the order sent. A send may wait for its recv: to send
        and receive at the same time, put both in one :meth:`group` (see ``DeviceRuntime.send``)."""
        ptr, n, dt = self._span(tensor, count, dtype)
        self._check_peer(peer, "send")
        self.runtime.send(ptr, n, dt, peer, self.handle, self._stream(stream, tensor))

    def recv(self, tensor, peer: int, *, stream: Stream, count=None, dtype=None) -> None:
        """Receive into ``tensor`` the next message from rank ``peer``, in ``stream`` order."""
        ptr, n, dt = self._span(tensor, count, dtype)
        self._check_peer(peer, "recv")
        self.runtime.recv(ptr, n, dt, peer, self.handle, self._stream(stream, tensor))

    @contextlib.contextmanager
    def group(self):
        """The sends and recvs called inside progress together (``group_start``/``group_end``):
        a rank may send to and receive from its peers in one group without deadlock."""
        self._check_usable()
        self._check_point_to_point("group")
        self.runtime.group_start()
        try:
            yield
        finally:
            self.runtime.group_end()

    def _check_peer(self, peer, call: str) -> None:
        self._check_point_to_point(call)
        if not isinstance(peer, int) or isinstance(peer, bool) or not 0 <= peer < self.nranks or peer == self.rank:
            raise InvalidArgumentError(
                f"{call} on {self._what}: peer {peer!r} must be another rank of the group (0..{self.nranks - 1}, "
                f"not {self.rank})"
            )

    def _check_point_to_point(self, call: str) -> None:
        if not self.runtime.supports("send"):
            raise NotSupportedError(
                f"backend '{self.runtime.name}' has no point-to-point {call} (send/recv, optional since "
                "contract 1.3); pipeline parallelism needs it"
            )

    # ---- abort (optional, contract 1.4; ``backend.supports("comm_abort")`` tells) -------------
    def abort(self) -> None:
        """End every collective, send and recv of this communicator, enqueued or running, from any
        thread (``DeviceRuntime.comm_abort``): a rank blocked waiting for a peer that died is freed
        (its stream syncs return or raise). Afterwards this communicator refuses collectives with
        :class:`CollectiveAbortedError`; ``close()`` still releases it. Idempotent; does nothing on a
        closed communicator."""
        with self._abort_lock:
            if self._aborted or self._closed:
                return
            if not self.runtime.supports("comm_abort"):
                raise NotSupportedError(
                    f"backend '{self.runtime.name}' cannot abort a communicator (comm_abort, optional since "
                    "contract 1.4)")
            self._aborted = True
            self.runtime.comm_abort(self.handle)

    @property
    def aborted(self) -> bool:
        return self._aborted

    def _check_usable(self) -> None:
        self._check_open()
        if self._aborted:
            raise CollectiveAbortedError(
                f"{self._what} was aborted; its group is unusable: close its communicators and create new ones")

    def _stream(self, stream: Stream, *memory) -> int:
        """``stream``'s handle, after checks; the stream holds torch tensors in ``memory`` until the
        collective has run (as it does pageable copies), so a temporary cannot be freed under it."""
        self._check_usable()
        stream._check_open()
        if stream.device is not self.device:
            raise InvalidArgumentError(f"{self._what} used with a stream on {stream.device}")
        stream._hold([m for m in memory if m is not None and not isinstance(m, DeviceBuffer)])
        return stream.handle

    def _span(self, memory, count, dtype) -> tuple[int, int, str]:
        """(address, element count, dtype name) of ``memory``, checked against this device."""
        if isinstance(memory, DeviceBuffer):
            if memory.device is not self.device:
                raise InvalidArgumentError(f"buffer on {memory.device} used with {self._what}")
            if count is None or dtype is None:
                raise InvalidArgumentError("collectives on a DeviceBuffer need count= and dtype=")
            dt = self._dtype(dtype)
            return memory.address(0, count * DTYPE_SIZES[dt]), count, dt
        if hasattr(memory, "data_ptr"):
            dt = self._dtype(memory.dtype if dtype is None else dtype)
            if memory.device != self.device.torch_device or not memory.is_contiguous():
                raise InvalidArgumentError(
                    f"collective tensor must be contiguous on {self.device.torch_device}, got {memory.device}"
                )
            n = memory.numel() if count is None else count
            if n * DTYPE_SIZES[dt] > memory.numel() * memory.element_size():
                raise InvalidArgumentError(f"count {n} exceeds the tensor's {memory.numel()} elements")
            return memory.data_ptr(), n, dt
        raise InvalidArgumentError(f"collectives take a DeviceBuffer or a torch tensor, got {type(memory).__name__}")

    def _dtype(self, dtype) -> str:
        dt = dtype_name(dtype)
        if dt not in self.runtime.collective_dtypes:
            raise InvalidArgumentError(
                f"{self.runtime.name}: collectives do not support {dt}; supported: {', '.join(self.runtime.collective_dtypes)}"
            )
        return dt

    def _release(self) -> None:
        with self._abort_lock:
            self.runtime.comm_destroy(self.handle)
