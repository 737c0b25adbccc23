"""Collectives between processes: a cpu communicator group over torch.distributed's gloo.

``comm_init_rank`` gives a process group when the ranks of a unique id live in different processes
(one process per rank, on one machine or several; see :mod:`.collectives`). Every collective runs on
the stream's worker as a gloo call on views of the device memory; reductions run in float64 (int64 for
integers) and round once at the end, as the in-process group does, so both give the same bits.

A peer process that dies makes the collectives waiting for it fail at once (gloo sees its sockets
close) with :class:`CollectiveError` naming the group's rank; one that hangs makes them fail after the
group's timeout (``ANYDEV_CPU_COLLECTIVE_TIMEOUT``).

``abort`` (contract 1.4's ``comm_abort``) frees the stream worker waiting in a call at once: every
wait is on an event that the call's completion or the abort sets (``ProcessGroupGloo.abort`` does not
end a pending ``wait``). The gloo call itself stays pending until its peers or its timeout end it,
so the aborted process group is kept (:data:`_ABORTED`) rather than destroyed under it.
"""
from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from ...plugin_api.errors import CollectiveAbortedError, CollectiveTimeoutError
from ...plugin_api.types import DTYPE_SIZES
from .libc import byte_view

TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
    "float64": torch.float64, "int64": torch.int64, "int8": torch.int8, "uint8": torch.uint8,
}
#: Process groups of aborted communicators: destroying one joins its gloo threads, which wait for the
#: stuck call (until its peers or its timeout end it); kept instead, so that destroy never hangs.
_ABORTED: list = []
_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.SUM}


class CollectiveError(CollectiveTimeoutError):
    """A collective across processes failed: a peer process died, hung past the timeout or left."""


class GlooGroup:
    """One process's rank of a group of processes; same ``run(rank, request)`` as the thread group."""

    def __init__(self, store, nranks: int, rank: int, timeout_s: float):
        self.nranks = nranks
        self.rank = rank
        self.timeout_s = timeout_s
        self._pg = dist.ProcessGroupGloo(store, rank, nranks, timedelta(seconds=timeout_s))
        self._sends: list = []   # (work, data) of sends not known to be delivered
        self._lock = threading.Lock()
        self._aborted = False
        self._waiting: set[threading.Event] = set()   # one per call being waited for

    def abort(self) -> None:
        """Free the calls being waited for (they raise :class:`CollectiveAbortedError`), and refuse later ones."""
        with self._lock:
            self._aborted = True
            for done in self._waiting:
                done.set()

    def _wait(self, work, kind: str) -> None:
        """Wait for ``work`` or an abort; raise the work's error, or CollectiveAbortedError."""
        done, failed = threading.Event(), []
        with self._lock:
            self._check_aborted(kind)
            self._waiting.add(done)
        try:
            try:
                future = work.get_future()
            except RuntimeError:   # send/recv works have no future: a helper thread waits instead
                future = None
                threading.Thread(target=_wait_on_thread, args=(work, done, failed), daemon=True,
                                 name="anydev-gloo-wait").start()
            else:
                future.add_done_callback(lambda _: done.set())
            done.wait()
        finally:
            with self._lock:
                self._waiting.discard(done)
        self._check_aborted(kind)
        if future is not None:
            work.wait()   # complete: returns at once, or raises gloo's error
        elif failed:
            raise failed[0]

    def _check_aborted(self, kind: str) -> None:
        if self._aborted:
            raise CollectiveAbortedError(
                f"cpu {kind} across processes: rank {self.rank} of {self.nranks}: the communicator was aborted; "
                "destroy it and create new communicators")

    def run(self, rank: int, request) -> None:
        """Run ``request`` (a :class:`.collectives.Request`) as this process's rank, on the stream worker."""
        try:
            getattr(self, "_" + request.kind)(request)
        except RuntimeError as exc:   # gloo's errors: a peer closed its connection, or the timeout
            raise CollectiveError(
                f"cpu {request.signature()} across processes: rank {self.rank} of {self.nranks} lost its "
                f"peers ({_first_line(exc)}); a peer process died or stopped calling collectives (the timeout "
                "is ANYDEV_CPU_COLLECTIVE_TIMEOUT). The group is unusable now; create new communicators."
            ) from exc

    def _all_reduce(self, request) -> None:
        send = _elements(request.send, request.count, request.dtype)
        wide = send.to(torch.float64 if send.is_floating_point() else torch.int64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = _REDUCE_OPS[request.op]
        self._wait(self._pg.allreduce([wide], opts), "all_reduce")
        if request.op == "avg":
            wide = wide / self.nranks if wide.is_floating_point() else torch.div(wide, self.nranks, rounding_mode="trunc")
        _elements(request.recv, request.count, request.dtype).copy_(wide)

    def _all_gather(self, request) -> None:
        send = _elements(request.send, request.count, request.dtype).clone()   # recv may hold send (in place)
        parts = [torch.empty_like(send) for _ in range(self.nranks)]
        self._wait(self._pg.allgather([parts], [send]), "all_gather")
        _elements(request.recv, request.count * self.nranks, request.dtype).copy_(torch.cat(parts))

    def _broadcast(self, request) -> None:
        data = _elements(request.send if self.rank == request.root else request.recv, request.count, request.dtype).clone()
        opts = dist.BroadcastOptions()
        opts.rootRank = request.root
        self._wait(self._pg.broadcast([data], opts), "broadcast")
        _elements(request.recv, request.count, request.dtype).copy_(data)

    # ---- point-to-point (contract 1.3): same calls as the thread group's mailboxes ----------------
    def send(self, rank: int, peer: int, address: int, count: int, dtype: str) -> None:
        """Post a copy of the data to ``peer`` (never waits for its recv; gloo keeps the order)."""
        data = _elements(address, count, dtype).clone()
        self._check_aborted("send")
        self._reap()
        self._sends.append((self._p2p("send", peer, lambda: self._pg.send([data], peer, 0)), data))

    def recv(self, rank: int, peer: int, address: int, count: int, dtype: str) -> None:
        """Wait for ``peer``'s next message and copy it to ``address``."""
        data = torch.empty(count, dtype=TORCH_DTYPES[dtype])
        self._p2p("recv", peer, lambda: self._wait(self._pg.recv([data], peer, 0), "recv"))
        _elements(address, count, dtype).copy_(data)

    def _p2p(self, kind: str, peer: int, call):
        try:
            return call()
        except RuntimeError as exc:
            raise CollectiveError(
                f"cpu {kind} across processes: rank {self.rank} of {self.nranks} lost rank {peer} ({_first_line(exc)}); "
                "the peer process died or stopped (the timeout is ANYDEV_CPU_COLLECTIVE_TIMEOUT)") from exc

    def _reap(self) -> None:
        """Forget the sends that completed (their data may go)."""
        self._sends = [(work, data) for work, data in self._sends if not work.is_completed()]

    def close(self) -> None:
        if self._aborted:   # its calls may still wait for peers: nothing to deliver, keep the group
            _ABORTED.append((self._pg, self._sends))
            self._sends, self._pg = [], None
            return
        for work, _ in self._sends:   # let sends in flight finish before the group goes
            try:
                work.wait()
            except RuntimeError:  # the peer is gone: nothing left to deliver
                pass
        self._sends = []
        self._pg = None


def _wait_on_thread(work, done: threading.Event, failed: list) -> None:
    """``work.wait()``, its error kept in ``failed`` for the thread waiting on ``done``."""
    try:
        work.wait()
    except RuntimeError as exc:
        failed.append(exc)
    finally:
        done.set()


def _elements(address: int, count: int, dtype: str) -> torch.Tensor:
    return byte_view(address, count * DTYPE_SIZES[dtype]).view(TORCH_DTYPES[dtype])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
