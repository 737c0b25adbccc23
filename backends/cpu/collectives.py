"""Collectives between the threads of one process (one thread, or stream worker, per rank).

Every rank's stream worker runs the same sequence of collectives on its communicator. For each one,
the ranks post their request and meet at a barrier; each then computes the result from all ranks'
send memory into a temporary, meets the others at a second barrier (so that nobody overwrites a send
buffer, in-place calls included, before every peer has read it) and writes its recv memory. Barriers
time out with :class:`CollectiveTimeoutError` instead of hanging; after a timeout the group is broken
and every later collective on it fails at once. ``abort`` (contract 1.4's ``comm_abort`` of any of
its ranks) breaks it at once: every rank waiting in it, or calling it later, gets
:class:`CollectiveAbortedError`.

Point-to-point messages (``send``/``recv``) go through one mailbox per ordered pair of ranks: a send
copies its data into the pair's queue when its stream reaches it (so it never waits for the recv);
a recv waits, on its stream, for the next message of the pair and copies it out. Queues keep the
order of sends, which is the contract's matching rule.
"""
from __future__ import annotations

import os
import secrets
import socket
import threading
from collections import deque
from dataclasses import dataclass
from datetime import timedelta

import torch

from ...plugin_api.errors import CollectiveAbortedError, CollectiveTimeoutError, InvalidArgumentError
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
        self.aborted_by: int | None = None   # the rank whose communicator was aborted

    def abort(self, rank: int) -> None:
        """End the group now: the ranks waiting in a collective or a recv raise, as do later calls."""
        with self._mail_cond:
            if self.aborted_by is None:
                self.aborted_by = rank
            self._mail_cond.notify_all()
        self._barrier.abort()

    def _check_aborted(self, rank: int, kind: str) -> None:
        if self.aborted_by is not None:
            raise CollectiveAbortedError(
                f"cpu {kind}: rank {rank} of {self.nranks}: the group was aborted (the communicator of rank "
                f"{self.aborted_by} was aborted); destroy its communicators and create new ones")

    def send(self, rank: int, peer: int, address: int, count: int, dtype: str) -> None:
        """Post a copy of ``count`` elements at ``address`` to ``peer``'s mailbox (never waits)."""
        message = (dtype, _elements(address, count, dtype).clone())
        with self._mail_cond:
            self._check_aborted(rank, "send")
            self._mail.setdefault((rank, peer), deque()).append(message)
            self._mail_cond.notify_all()

    def recv(self, rank: int, peer: int, address: int, count: int, dtype: str) -> None:
        """Wait for the next message from ``peer`` and copy it to ``address``; it must have ``count``
        elements of ``dtype``."""
        box = (peer, rank)
        with self._mail_cond:
            arrived = self._mail_cond.wait_for(lambda: self._mail.get(box) or self.aborted_by is not None, self.timeout_s)
            self._check_aborted(rank, "recv")
            if not arrived:
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
        self._check_aborted(rank, kind)
        if self._barrier.broken:
            raise CollectiveTimeoutError(
                f"cpu {kind}: this communicator group was broken by an earlier collective timeout; "
                "destroy its communicators and create new ones"
            )
        try:
            self._barrier.wait(self.timeout_s)
        except threading.BrokenBarrierError:
            self._check_aborted(rank, kind)
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
# An id names a c10d TCPStore that the process which made it serves: ``anydev-cpu:TOKEN@HOST:PORT``.
# Every rank that joins writes its process into the store; when all ranks are threads of one process
# they share an in-process :class:`Group`, otherwise each process gets a :class:`.gloo.GlooGroup`.
_ID_PREFIX = b"anydev-cpu:"
HOST_ENV = "ANYDEV_CPU_COMM_HOST"
_lock = threading.Lock()
_servers: dict[str, object] = {}            # token -> the TCPStore this process serves for its ids
_local: dict[str, tuple[Group, set]] = {}   # token -> the in-process group and the ranks that joined


def new_unique_id(timeout_s: float) -> bytes:
    """A fresh id; this process serves its store (on a free port of ``$ANYDEV_CPU_COMM_HOST``, default
    this host's name) until the communicators made from it are destroyed."""
    import torch.distributed as dist

    host = os.environ.get(HOST_ENV) or _default_host()
    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))
    token = secrets.token_hex(16)
    with _lock:
        _servers[token] = store
    return _ID_PREFIX + f"{token}@{host}:{store.port}".encode()


def join(unique_id: bytes, nranks: int, rank: int, timeout_s: float):
    """Join the group of ``unique_id`` as ``rank``; block until all ``nranks`` ranks have joined.
    Returns a :class:`Group` (all ranks in this process) or a :class:`.gloo.GlooGroup`."""
    import torch.distributed as dist

    token, host, port = _parse(unique_id)
    with _lock:
        server = _servers.get(token)
    if server is not None:   # served by this process, on every interface
        host = "127.0.0.1"
    try:   # a client of its own: a store connection serves one blocking call at a time
        store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s))
    except Exception as exc:  # torch's DistNetworkError and kin: said as a typed error
        raise CollectiveTimeoutError(
            f"cpu comm_init_rank: rank {rank} cannot reach the group's store at {host}:{port} ({exc}); the process "
            f"that made the unique id must be alive and {host} reachable (set {HOST_ENV} on it to an address "
            "the other ranks can reach)") from None
    group_store = dist.PrefixStore(f"{token}/", store)
    if group_store.add(f"joins/{rank}", 1) != 1:
        raise InvalidArgumentError(f"rank {rank} has already joined this group")
    me = f"{socket.gethostname()}/{os.getpid()}"
    group_store.set(f"member/{rank}", f"{me} {nranks}")
    keys = [f"member/{r}" for r in range(nranks)]
    try:
        group_store.wait(keys, timedelta(seconds=timeout_s))
    except Exception:  # the store's timeout error
        missing = [r for r in range(nranks) if not group_store.check([keys[r]])]
        raise CollectiveTimeoutError(
            f"cpu comm_init_rank: rank {rank} of {nranks} waited {timeout_s:g} s; rank(s) {missing} never joined "
            "(the timeout is ANYDEV_CPU_COLLECTIVE_TIMEOUT)") from None
    members = [group_store.get(key).decode().split(" ") for key in keys]
    if any(int(n) != nranks for _, n in members):
        raise InvalidArgumentError(f"the ranks of this group joined with different nranks: {[int(n) for _, n in members]}")
    if all(process == me for process, _ in members):
        group = _join_local(token, nranks, rank, timeout_s)
    else:
        from .gloo import GlooGroup

        group = GlooGroup(dist.PrefixStore("gloo/", group_store), nranks, rank, timeout_s)
    group.keepalive = (store, server)   # the store (served here when this process made the id) lives with the group
    with _lock:
        _servers.pop(token, None)
    return group


def _join_local(token: str, nranks: int, rank: int, timeout_s: float) -> Group:
    with _lock:
        group, joined = _local.setdefault(token, (Group(nranks, timeout_s), set()))
        joined.add(rank)
        if len(joined) == nranks:
            del _local[token]
    return group


def _parse(unique_id: bytes) -> tuple[str, str, int]:
    text = bytes(unique_id)
    try:
        token, address = text[len(_ID_PREFIX):].decode().split("@", 1)
        host, port = address.rsplit(":", 1)
        if not text.startswith(_ID_PREFIX):
            raise ValueError
        return token, host, int(port)
    except ValueError:
        raise InvalidArgumentError(
            f"unique id {text[:48]!r} is unknown: get one from the cpu backend's comm_unique_id() and send it to "
            "every rank of the group") from None


def _default_host() -> str:
    """This host's name when it resolves (what gloo binds to as well), else the loopback address."""
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
        return name
    except OSError:
        return "127.0.0.1"
