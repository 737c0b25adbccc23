"""Collectives between the threads of one process (one thread, or stream worker, per rank).

Every rank's stream worker runs the same sequence of collectives on its communicator. For each one,
the ranks post their request and meet at a barrier; each then computes the result from all ranks'
send memory into a temporary, meets the others at a second barrier (so that nobody overwrites a send
buffer, in-place calls included, before every peer has read it) and writes its recv memory. Barriers
time out with :class:`CollectiveTimeoutError` instead of hanging; after a timeout the group is broken
and every later collective on it fails at once.

Point-to-point messages (``send``/``recv``) go through one mailbox per ordered pair of ranks: a send
copies its data into the pair's queue when its stream reaches it (so it never waits for the recv);
a recv waits, on its stream, for the next message of the pair and copies it out. Queues keep the
order of sends, which is the contract's matching rule.
"""
from __future__ import annotations

import secrets
import threading
from collections import deque
from dataclasses import dataclass

import torch

from ...plugin_api.errors import CollectiveTimeoutError, InvalidArgumentError
from ...plugin_api.types import DTYPE_SIZES
from .errors import INVALID_VALUE, call_error
from .libc import byte_view

TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
    "float64": torch.float64, "int64": torch.int64, "int8": torch.int8, "uint8": torch.uint8,
}


@dataclass(frozen=True)
class Request:
    """What one rank asks of a collective. ``op`` is for all_reduce, ``root`` for broadcast."""

    kind: str
    send: int
    recv: int
    count: int
    dtype: str
    op: str = ""
    root: int = 0

    def signature(self) -> str:
        extra = f", op={self.op}" if self.kind == "all_reduce" else f", root={self.root}" if self.kind == "broadcast" else ""
        return f"{self.kind}(count={self.count}, {self.dtype}{extra})"


class Group:
    """The ranks of one communicator group, meeting at barriers."""

    def __init__(self, nranks: int, timeout_s: float):
        self.nranks = nranks
        self.timeout_s = timeout_s
        self._barrier = threading.Barrier(nranks)
        self._requests: list[Request | None] = [None] * nranks
        self._num_entered = [0] * nranks  # collectives each rank has entered, to name the missing ones
        self._mail_cond = threading.Condition()
        self._mail: dict[tuple[int, int], deque[tuple[str, torch.Tensor]]] = {}  # (src, dst) -> messages

    def send(self, rank: int, peer: int, address: int, count: int, dtype: str) -> None:
        """Post a copy of ``count`` elements at ``address`` to ``peer``'s mailbox (never waits)."""
        message = (dtype, _elements(address, count, dtype).clone())
        with self._mail_cond:
            self._mail.setdefault((rank, peer), deque()).append(message)
            self._mail_cond.notify_all()

    def recv(self, rank: int, peer: int, address: int, count: int, dtype: str) -> None:
        """Wait for the next message from ``peer`` and copy it to ``address``; it must have ``count``
        elements of ``dtype``."""
        box = (peer, rank)
        with self._mail_cond:
            if not self._mail_cond.wait_for(lambda: self._mail.get(box), self.timeout_s):
                raise CollectiveTimeoutError(
                    f"cpu recv: rank {rank} of {self.nranks} waited {self.timeout_s:g} s for a message from rank {peer}, "
                    "which never sent it (every recv needs a matching send; the timeout is ANYDEV_CPU_COLLECTIVE_TIMEOUT)"
                )
            sent_dtype, data = self._mail[box].popleft()
        if (sent_dtype, data.numel()) != (dtype, count):
            raise call_error("recv", INVALID_VALUE,
                             f"rank {rank} receives {count} {dtype} from rank {peer}, which sent {data.numel()} {sent_dtype}; "
                             "a send and its recv must have the same count and dtype")
        _elements(address, count, dtype).copy_(data)

    def run(self, rank: int, request: Request) -> None:
        """Run ``request`` as ``rank``. Called on the rank's stream worker."""
        self._requests[rank] = request
        self._num_entered[rank] += 1
        self._meet(rank, request.kind)
        requests = list(self._requests)
        result, error = None, None
        try:
            _check_agreement(requests)
            result = _COMPUTE[request.kind](requests, request)
        except Exception as exc:  # raised below, after the barrier, so that the peers are not left waiting
            error = exc
        self._meet(rank, request.kind)
        if error is not None:
            raise error
        _elements(request.recv, result.numel(), request.dtype).copy_(result)

    def _meet(self, rank: int, kind: str) -> None:
        if self._barrier.broken:
            raise CollectiveTimeoutError(
                f"cpu {kind}: this communicator group was broken by an earlier collective timeout; "
                "destroy its communicators and create new ones"
            )
        try:
            self._barrier.wait(self.timeout_s)
        except threading.BrokenBarrierError:
            missing = [r for r in range(self.nranks) if self._num_entered[r] < self._num_entered[rank]]
            who = f"rank(s) {missing} never reached it" if missing else "a peer failed inside it"
            raise CollectiveTimeoutError(
                f"cpu {kind}: rank {rank} of {self.nranks} waited {self.timeout_s:g} s for its peers; {who}. "
                "Every rank must call the same collectives in the same order (the timeout is "
                "ANYDEV_CPU_COLLECTIVE_TIMEOUT). The group is unusable now; create new communicators."
            ) from None


def _check_agreement(requests: list[Request]) -> None:
    first = requests[0]
    if any((r.kind, r.count, r.dtype, r.op, r.root) != (first.kind, first.count, first.dtype, first.op, first.root) for r in requests):
        calls = "; ".join(f"rank {rank}: {r.signature()}" for rank, r in enumerate(requests))
        raise call_error(first.kind, INVALID_VALUE, f"the ranks called different collectives: {calls}")


def _elements(address: int, count: int, dtype: str) -> torch.Tensor:
    return byte_view(address, count * DTYPE_SIZES[dtype]).view(TORCH_DTYPES[dtype])


REDUCE_CHUNK = 1 << 20  # elements reduced at a time: bounds the float64 temporaries of large calls


def _all_reduce(requests: list[Request], mine: Request) -> torch.Tensor:
    sends = [_elements(r.send, mine.count, mine.dtype) for r in requests]
    out = torch.empty(mine.count, dtype=sends[0].dtype)
    for start in range(0, mine.count, REDUCE_CHUNK):
        end = min(start + REDUCE_CHUNK, mine.count)
        out[start:end] = _reduce_chunk(torch.stack([s[start:end] for s in sends]), mine.op, len(requests))
    return out


def _reduce_chunk(stacked: torch.Tensor, op: str, nranks: int) -> torch.Tensor:
    is_float = stacked.is_floating_point()
    wide = stacked.to(torch.float64 if is_float else torch.int64)  # one rounding, at the end
    if op == "sum":
        return wide.sum(0)
    if op == "prod":
        return wide.prod(0)
    if op == "max":
        return wide.amax(0)
    if op == "min":
        return wide.amin(0)
    total = wide.sum(0)  # avg: integer types truncate, as NCCL does
    return total / nranks if is_float else torch.div(total, nranks, rounding_mode="trunc")


def _all_gather(requests: list[Request], mine: Request) -> torch.Tensor:
    return torch.cat([_elements(r.send, mine.count, mine.dtype) for r in requests])


def _broadcast(requests: list[Request], mine: Request) -> torch.Tensor:
    return _elements(requests[mine.root].send, mine.count, mine.dtype).clone()


_COMPUTE = {"all_reduce": _all_reduce, "all_gather": _all_gather, "broadcast": _broadcast}


# ---- groups formed from a unique id (comm_unique_id / comm_init_rank) ------------------------
class _Rendezvous:
    def __init__(self):
        self.cond = threading.Condition()
        self.group: Group | None = None
        self.joined: set[int] = set()


_rendezvous_lock = threading.Lock()
_rendezvous: dict[bytes, _Rendezvous] = {}
_ID_PREFIX = b"anydev-cpu:"


def new_unique_id() -> bytes:
    """A fresh id, registered in this process so that ``join`` can find it."""
    unique_id = _ID_PREFIX + secrets.token_bytes(16)
    with _rendezvous_lock:
        _rendezvous[unique_id] = _Rendezvous()
    return unique_id


def join(unique_id: bytes, nranks: int, rank: int, timeout_s: float) -> Group:
    """Join the group of ``unique_id`` as ``rank``; block until all ``nranks`` ranks have joined."""
    with _rendezvous_lock:
        meeting = _rendezvous.get(bytes(unique_id))
    if meeting is None:
        raise InvalidArgumentError(
            f"unique id {bytes(unique_id)[:32]!r} is unknown: get one from comm_unique_id() in this process "
            "(the cpu backend's collectives join threads of one process, not separate processes), "
            "and use it for one group only"
        )
    with meeting.cond:
        if meeting.group is None:
            meeting.group = Group(nranks, timeout_s)
        if meeting.group.nranks != nranks:
            raise InvalidArgumentError(f"rank {rank} joins with nranks={nranks}, but the group has {meeting.group.nranks} ranks")
        if rank in meeting.joined:
            raise InvalidArgumentError(f"rank {rank} has already joined this group")
        meeting.joined.add(rank)
        meeting.cond.notify_all()
        if not meeting.cond.wait_for(lambda: len(meeting.joined) == nranks, timeout_s):
            meeting.joined.discard(rank)
            missing = sorted(set(range(nranks)) - meeting.joined - {rank})
            raise CollectiveTimeoutError(
                f"cpu comm_init_rank: rank {rank} of {nranks} waited {timeout_s:g} s; rank(s) {missing} never joined "
                "(the timeout is ANYDEV_CPU_COLLECTIVE_TIMEOUT)"
            )
        group = meeting.group
    with _rendezvous_lock:
        _rendezvous.pop(bytes(unique_id), None)
    return group
