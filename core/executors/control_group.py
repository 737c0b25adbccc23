"""The control group: rank 0's commands to every rank, and the ranks' replies and failure reports.

Rank 0 drives: it runs the scheduler and sends every other rank what to run, through
torch.distributed and shared memory (the activations aside). Each command is written once into a
shared-memory queue that the ranks of rank 0's machine read, and broadcast over gloo to the ranks of
other machines (a step travels as its packed :class:`~anydev.core.models.batch.StepBatch` bytes and a
msgpack header, anything else pickled). Replies and reports go through the c10d store (:mod:`.store`).

The activations' all_reduce/all_gather run on the backend's own communicator, made from a unique id
that rank 0 sends in its first message.
"""
from __future__ import annotations

import os
import socket
import threading
from datetime import timedelta
from typing import Mapping

import torch

from .group_errors import ControlLost, LaunchError, first_line
from .launch import CONNECT_TIMEOUT_ENV, Launch, seconds_from_env
from .shm_queue import MessageQueue, ReaderStuck, WriterGone
from .step_message import decode, dumps, encode

#: How often rank 0, waiting for a command to reach a rank, looks whether a failure was seen meanwhile.
INTERRUPT_POLL_S = 0.1
#: "0": this rank takes rank 0's messages by gloo even on rank 0's machine (containers that share
#: no /dev/shm).
CONTROL_SHM_ENV = "ANYDEV_CONTROL_SHM"
#: Seconds rank 0 waits for a rank of its machine to read its earlier messages before naming it stuck.
QUEUE_TIMEOUT_ENV = "ANYDEV_CONTROL_QUEUE_TIMEOUT"


class ControlGroup:
    """Rank 0's messages to every rank, replies and failure reports (the store).

    Rank 0 writes each message once into a shared-memory queue (:mod:`.shm_queue`) that the
    ranks of its machine read; the ranks of other machines take it from a gloo broadcast among rank 0
    and them. Which rank is where comes from the store at start. Messages are bytes of
    :mod:`.step_message`: steps without pickle."""

    def __init__(self, launch: Launch, store, timeout_s: float):
        self.launch = launch
        self.rank, self.world_size = launch.rank, launch.world_size
        self.store = store
        self.queue_wait_s = seconds_from_env(QUEUE_TIMEOUT_ENV, 60.0)
        self.local_ranks, self.remote_ranks = _split_by_host(launch, store, timeout_s)
        self._queue: MessageQueue | None = None
        self._pg = None
        if self.local_ranks and (self.rank == 0 or self.rank in self.local_ranks):
            self._queue = self._join_queue(timeout_s)
        if self.remote_ranks and (self.rank == 0 or self.rank in self.remote_ranks):
            self._pg = self._join_gloo(timeout_s)

    def _join_queue(self, timeout_s: float) -> MessageQueue:
        if self.rank == 0:
            queue = MessageQueue.create(self.local_ranks)
            try:
                self.store.set("control/queue", queue.name)
                queue.wait_for_readers(timeout_s)
            except ReaderStuck as exc:
                queue.close()
                raise LaunchError(f"{exc}: every rank of this machine must start and reach /dev/shm; set "
                                  f"{CONTROL_SHM_ENV}=0 on ranks that share no /dev/shm with rank 0") from None
            queue.unlink()   # every reader has it mapped: nothing is left in /dev/shm whatever happens next
            return queue
        try:
            self.store.wait(["control/queue"], timedelta(seconds=timeout_s))
            name = self.store.get("control/queue").decode()
            return MessageQueue.attach(name, self.local_ranks.index(self.rank), self.rank)
        except Exception as exc:
            raise LaunchError(f"rank {self.rank} could not open rank 0's message queue within {timeout_s:g} s "
                              f"({first_line(exc)}); set {CONTROL_SHM_ENV}=0 on ranks that share no /dev/shm "
                              "with rank 0") from None

    def _join_gloo(self, timeout_s: float):
        import torch.distributed as dist

        members = [0, *self.remote_ranks]
        try:
            return dist.ProcessGroupGloo(dist.PrefixStore("control/gloo/", self.store), members.index(self.rank),
                                         len(members), timedelta(seconds=timeout_s))
        except Exception as exc:
            raise LaunchError(f"rank {self.rank} could not form the gloo control group of ranks {members} "
                              f"through {self.launch.store_address} within {timeout_s:g} s ({first_line(exc)}); "
                              "every rank must start, and reach the others (GLOO_SOCKET_IFNAME picks the "
                              "network interface)") from None

    # ---- rank 0 -> everyone ---------------------------------------------------------------------
    def send(self, message, interrupt: threading.Event | None = None) -> None:
        """Rank 0: send ``message`` to every rank. A rank that hangs (alive, its sockets open) holds the
        gloo broadcast back: once ``interrupt`` is set (a failure was seen) it raises ControlLost
        instead; a rank of this machine that died or hung is a :class:`QueueError` naming it."""
        if self._queue is None and self._pg is None:   # a group of rank 0 alone
            return
        parts = encode(message)
        if self._queue is not None:
            self._queue.put(parts, self.queue_wait_s, interrupt)
        if self._pg is not None:
            payload = torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8)
            self._broadcast(torch.tensor([payload.numel()], dtype=torch.int64), interrupt)
            self._broadcast(payload, interrupt)

    def receive(self):
        """Ranks other than 0: the next message of rank 0 (blocks)."""
        if self._queue is not None:
            try:
                return decode(self._queue.get())
            except WriterGone as exc:
                raise ControlLost(str(exc)) from exc
        size = torch.zeros(1, dtype=torch.int64)
        self._broadcast(size)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        self._broadcast(payload)
        return decode(bytearray(payload.numpy().tobytes()))
    def _broadcast(self, tensor: torch.Tensor, interrupt: threading.Event | None = None) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        # Commands may be far apart (an idle server): no timeout of their own; the watchdog's
        # heartbeats and gloo's closed sockets tell a dead peer from a quiet one.
        opts.timeout = timedelta(days=7)
        try:
            work = self._pg.broadcast([tensor], opts)
            if interrupt is not None:
                done = threading.Event()
                work.get_future().add_done_callback(lambda _: done.set())
                while not done.wait(INTERRUPT_POLL_S):
                    if interrupt.is_set():   # the broadcast stays pending in gloo; the group is done for
                        raise ControlLost(f"a rank of the control group of {self.world_size} failed while rank 0 "
                                          "was sending it a command")
            work.wait()
        except RuntimeError as exc:
            raise ControlLost(f"the control group of {self.world_size} ranks broke ({first_line(exc)})") from exc

    # ---- everyone -> rank 0 ---------------------------------------------------------------------
    def reply(self, seq: int, value) -> None:
        self.store.set(f"reply/{seq}/{self.rank}", dumps(value))

    def report_failure(self, reason: str) -> None:
        """Tell every rank that this one failed (read by their watchdogs)."""
        self.store.set(f"failed/{self.rank}", reason.encode())
        self.store.add("failures", 1)

    def report_stopped(self, cause: int) -> None:
        """Record that this rank ends because rank ``cause`` failed: rank 0 then names ``cause``,
        not this rank, even when this one's process is seen dead first."""
        self.store.set(f"stopped/{self.rank}", str(cause).encode())

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()
        self._pg = None


def host_identity(rank: int, environ: Mapping[str, str] = os.environ) -> str:
    """What ranks of one machine (one /dev/shm) share: the host name and boot id; a rank with
    ``ANYDEV_CONTROL_SHM=0`` gets one of its own (it takes rank 0's messages by gloo)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    own = f"/rank{rank}" if environ.get(CONTROL_SHM_ENV) == "0" else ""
    return f"{socket.gethostname()}/{boot}{own}"


def _split_by_host(launch: Launch, store, timeout_s: float) -> tuple[list[int], list[int]]:
    """(the ranks other than 0 on rank 0's machine, the others), as every rank tells the store."""
    store.set(f"control/host/{launch.rank}", host_identity(launch.rank))
    keys = [f"control/host/{r}" for r in range(launch.world_size)]
    try:
        store.wait(keys, timedelta(seconds=timeout_s))
    except Exception as exc:
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        raise LaunchError(f"rank(s) {', '.join(map(str, missing))} did not join the group of {launch.world_size} "
                          f"through {launch.store_address} within {timeout_s:g} s ({first_line(exc)}); every rank "
                          f"must start ({CONNECT_TIMEOUT_ENV} sets the wait)") from None
    hosts = [store.get(key).decode() for key in keys]
    local = [r for r in range(1, launch.world_size) if hosts[r] == hosts[0]]
    return local, [r for r in range(1, launch.world_size) if hosts[r] != hosts[0]]
