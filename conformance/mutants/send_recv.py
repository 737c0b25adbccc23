"""Mutants of point-to-point send/recv (contract 1.3): a recv that never writes, a send to the wrong
peer, messages of a pair delivered out of order, a send that reads its buffer outside stream order,
and a send that moves only the first 1 MiB."""
from __future__ import annotations

import ctypes
import threading

from anydev.backends.cpu.runtime import CpuRuntime
from anydev.plugin_api.types import DTYPE_SIZES

from . import mutant

MiB = 1 << 20
CHECKS = ["test_send_recv.py"]


@mutant("recv-never-writes", checks=CHECKS)
class RecvNeverWrites(CpuRuntime):
    """recv takes the peer's message off its queue and never writes it to the recv buffer."""

    @staticmethod
    def _mover(kind, group):
        if kind == "send":
            return group.send

        def discard(rank, peer, address, count, dtype):
            scratch = ctypes.create_string_buffer(max(1, count * DTYPE_SIZES[dtype]))
            group.recv(rank, peer, ctypes.addressof(scratch), count, dtype)

        return discard


@mutant("send-wrong-peer", checks=CHECKS)
class SendToTheWrongPeer(CpuRuntime):
    """send delivers to rank peer+1 (mod nranks) instead of peer: on 2 ranks, to the sender itself."""

    @staticmethod
    def _mover(kind, group):
        if kind == "recv":
            return group.recv
        return lambda rank, peer, address, count, dtype: group.send(rank, (peer + 1) % group.nranks, address, count, dtype)


@mutant("recv-last-message-first", checks=CHECKS)
class RecvNewestFirst(CpuRuntime):
    """recv takes the newest waiting message of the pair instead of the oldest (messages reordered)."""

    @staticmethod
    def _mover(kind, group):
        if kind == "send":
            return group.send

        def newest_first(rank, peer, address, count, dtype):
            with group._mail_cond:
                queue = group._mail.get((peer, rank))
                if queue and len(queue) > 1:
                    queue.rotate(1)   # the newest message moves to the front
            group.recv(rank, peer, address, count, dtype)

        return newest_first


@mutant("send-reads-at-call", checks=CHECKS)
class SendReadsAtCall(CpuRuntime):
    """send copies its buffer when called, not when its stream reaches it (ignores stream order)."""

    _taken = threading.local()   # the snapshot of the send being enqueued, for _mover

    def send(self, send, count, dtype, peer, comm, stream):
        nbytes = count * DTYPE_SIZES[dtype]
        self._taken.snapshot = ctypes.create_string_buffer(ctypes.string_at(send, nbytes), max(1, nbytes))
        try:
            super().send(ctypes.addressof(self._taken.snapshot), count, dtype, peer, comm, stream)
        finally:
            self._taken.snapshot = None

    def _mover(self, kind, group):
        if kind != "send":
            return group.recv
        snapshot = self._taken.snapshot

        def send_snapshot(rank, peer, address, count, dtype):   # holds its snapshot until the send has run
            group.send(rank, peer, ctypes.addressof(snapshot), count, dtype)

        return send_snapshot


@mutant("send-first-mib-only", checks=["test_send_recv.py::test_ring_pass_at_64_mib"])
class SendFirstMiBOnly(CpuRuntime):
    """send moves the first 1 MiB of a message; beyond it the receiver gets zeros."""

    @staticmethod
    def _mover(kind, group):
        if kind == "recv":
            return group.recv

        def truncated(rank, peer, address, count, dtype):
            size = DTYPE_SIZES[dtype]
            head = min(count, MiB // size)
            padded = ctypes.create_string_buffer(count * size)
            ctypes.memmove(padded, address, head * size)
            group.send(rank, peer, ctypes.addressof(padded), count, dtype)

        return truncated
