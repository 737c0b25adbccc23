"""Process-per-rank plumbing over torch.distributed: the launch, the c10d store, the control group.

A group of rank processes is started by torchrun (or any launcher that sets its variables: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) or by anydev itself
(``executor="mp"``, :mod:`.processes`). Rank 0 drives: it runs the scheduler and sends every other rank
what to run, through torch.distributed and shared memory (the activations aside):

* the **c10d TCPStore** at ``MASTER_ADDR:MASTER_PORT``: replies to rank 0, failure reports,
  heartbeats, and where each rank runs;
* :class:`ControlGroup`: rank 0's commands, each written once into a shared-memory queue that the
  ranks of rank 0's machine read, and broadcast over gloo to the ranks of other machines (a step
  travels as its packed :class:`~anydev.core.models.batch.StepBatch` bytes and a msgpack header, anything else
  pickled).

The activations' all_reduce/all_gather run on the backend's own communicator, made from a unique id
that rank 0 sends in its first message. :class:`Watchdog` makes a rank that dies, hangs or fails
visible to the others within seconds.
"""
from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Mapping

import torch

from anydev.plugin_api.errors import AnydevError

from ..errors import EngineConfigError
from .shm_queue import MessageQueue, ReaderStuck, WriterGone
from .step_message import decode, dumps, encode

LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: Seconds to reach the store and form the control group (a rank that starts later than this fails).
CONNECT_TIMEOUT_ENV = "ANYDEV_DIST_CONNECT_TIMEOUT"
#: Seconds without a heartbeat after which a rank counts as gone (hung, or its machine lost).
HEARTBEAT_TIMEOUT_ENV = "ANYDEV_DIST_HEARTBEAT_TIMEOUT"
HEARTBEAT_INTERVAL_S = 0.5
#: How often rank 0, waiting for a command to reach a rank, looks whether a failure was seen meanwhile.
INTERRUPT_POLL_S = 0.1
#: The longest pause between two looks for a rank's reply in the store.
REPLY_POLL_S = 0.05
#: "0": this rank takes rank 0's messages by gloo even on rank 0's machine (containers that share
#: no /dev/shm).
CONTROL_SHM_ENV = "ANYDEV_CONTROL_SHM"
#: Seconds rank 0 waits for a rank of its machine to read its earlier messages before naming it stuck.
QUEUE_TIMEOUT_ENV = "ANYDEV_CONTROL_QUEUE_TIMEOUT"


class LaunchError(AnydevError):
    """A rank process was launched wrongly: a torchrun variable missing or malformed, a world size
    that does not match the engine's ranks, or a store that cannot be reached. The message says how
    to launch instead."""


class RankFailedError(AnydevError):
    """A rank of a process group died, hung or raised; every rank of the group stops. ``rank`` names it."""

    def __init__(self, rank: int, reason: str):
        self.rank = rank
        self.reason = reason
        super().__init__(f"rank {rank} failed: {reason}")

    def __reduce__(self):
        return RankFailedError, (self.rank, self.reason)


@dataclass(frozen=True)
class Launch:
    """Where this process stands in its group of rank processes."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    agent_store: bool = False    # torchrun's agent serves the store; every rank is a client
    run_id: str = "anydev"

    @property
    def store_address(self) -> str:
        return f"{self.master_addr}:{self.master_port}"


def launch_from_env(environ: Mapping[str, str] = os.environ) -> Launch | None:
    """This process's :class:`Launch` from torchrun's variables; None when none is set (one process
    runs every rank). A partial or malformed set is a :class:`LaunchError`."""
    present = [name for name in LAUNCH_VARIABLES if environ.get(name)]
    if not present:
        return None
    missing = [name for name in LAUNCH_VARIABLES if not environ.get(name)]
    if missing:
        raise LaunchError(
            f"{', '.join(present)} set but {', '.join(missing)} not: launch every rank with torchrun (it sets "
            f"{', '.join(LAUNCH_VARIABLES)}), set all five, or unset them all to run every rank in this process")
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        try:
            values[name] = int(environ[name])
        except ValueError:
            raise LaunchError(f"{name}={environ[name]!r} is not a whole number; torchrun sets it, or set it yourself") from None
    world, rank, local, port = values["WORLD_SIZE"], values["RANK"], values["LOCAL_RANK"], values["MASTER_PORT"]
    if world < 1 or not 0 <= rank < world or local < 0 or not 0 < port < 65536:
        raise LaunchError(f"RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}, MASTER_PORT={port} do not fit "
                          "together: 0 <= RANK < WORLD_SIZE, LOCAL_RANK >= 0, MASTER_PORT in 1..65535")
    run_id = f"{environ.get('TORCHELASTIC_RUN_ID', 'anydev')}/{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return Launch(rank, world, local, environ["MASTER_ADDR"], port,
                  agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True", run_id=run_id)


def check_world_size(launch: Launch, tp: int, pp: int = 1) -> None:
    """A :class:`LaunchError` unless the group has one process per rank of ``tp`` x ``pp``."""
    needed = tp * pp
    if launch.world_size != needed:
        layout = f"--tp {tp}" + (f" x --pp {pp}" if pp > 1 else "")
        raise LaunchError(
            f"WORLD_SIZE={launch.world_size}, but {layout} runs on {needed} rank process(es): launch {needed} in all "
            f"(torchrun --nnodes N --nproc-per-node M with N x M = {needed}), or set --tp to {launch.world_size}")


def check_local_device(launch: Launch, backend) -> None:
    """An :class:`EngineConfigError` unless ``backend`` has the device this rank uses (LOCAL_RANK)."""
    count = backend.device_count()
    if launch.local_rank >= count:
        raise EngineConfigError(
            f"rank {launch.rank}: LOCAL_RANK={launch.local_rank}, but backend '{backend.name}' has {count} device(s) "
            f"on this machine; start at most {count} rank processes per machine (torchrun --nproc-per-node)")


def seconds_from_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise LaunchError(f"{name}={text!r} must be a positive number of seconds")
    return value


def connect_store(launch: Launch, timeout_s: float, serve: bool = False):
    """A client of the c10d store at MASTER_ADDR:MASTER_PORT (the server itself on rank 0 when
    ``serve``), prefixed with this run's keys. Unreachable: a :class:`LaunchError` saying what to check."""
    import torch.distributed as dist

    try:
        if not serve:   # said here, in one line, rather than by c10d's retry log
            _wait_reachable(launch.master_addr, launch.master_port, timeout_s)
        store = dist.TCPStore(launch.master_addr, launch.master_port, is_master=serve, wait_for_workers=False,
                              timeout=timedelta(seconds=timeout_s))
    except Exception as exc:  # torch's DistNetworkError / DistStoreError / RuntimeError: one typed error
        raise LaunchError(
            f"rank {launch.rank} cannot reach the c10d store at {launch.store_address} within {timeout_s:g} s "
            f"({_first_line(exc)}): start rank 0 (or torchrun's node of the rendezvous endpoint), check "
            f"MASTER_ADDR/MASTER_PORT and that this port is open between the machines ({CONNECT_TIMEOUT_ENV} "
            "sets the wait)") from None
    return dist.PrefixStore(f"anydev/{launch.run_id}/", store)


def _wait_reachable(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=min(1.0, timeout_s)).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ConnectionError(f"nothing answers there: {exc}") from None
            time.sleep(0.2)


class ControlLost(AnydevError):
    """The control group broke: a peer process (usually rank 0) is gone."""


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
                              f"({_first_line(exc)}); set {CONTROL_SHM_ENV}=0 on ranks that share no /dev/shm "
                              "with rank 0") from None

    def _join_gloo(self, timeout_s: float):
        import torch.distributed as dist

        members = [0, *self.remote_ranks]
        try:
            return dist.ProcessGroupGloo(dist.PrefixStore("control/gloo/", self.store), members.index(self.rank),
                                         len(members), timedelta(seconds=timeout_s))
        except Exception as exc:
            raise LaunchError(f"rank {self.rank} could not form the gloo control group of ranks {members} "
                              f"through {self.launch.store_address} within {timeout_s:g} s ({_first_line(exc)}); "
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
            raise ControlLost(f"the control group of {self.world_size} ranks broke ({_first_line(exc)})") from exc

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
                          f"through {launch.store_address} within {timeout_s:g} s ({_first_line(exc)}); every rank "
                          f"must start ({CONNECT_TIMEOUT_ENV} sets the wait)") from None
    hosts = [store.get(key).decode() for key in keys]
    local = [r for r in range(1, launch.world_size) if hosts[r] == hosts[0]]
    return local, [r for r in range(1, launch.world_size) if hosts[r] != hosts[0]]


def wait_reply(store, seq: int, rank: int, failed: threading.Event):
    """Rank 0: rank ``rank``'s reply to message ``seq``; returns None early when ``failed`` is set.

    The key is polled (every 1 ms at first, backing off to ``REPLY_POLL_S``): a store ``wait`` that
    times out makes c10d log two "waitForInput ... timed out" warnings each time."""
    key, pause = f"reply/{seq}/{rank}", 0.001
    while not store.check([key]):
        if failed.wait(pause):
            return None
        pause = min(2 * pause, REPLY_POLL_S)
    value = pickle.loads(store.get(key))
    store.delete_key(key)
    return value


def stopped_ranks(store, world_size: int) -> set[int]:
    """The ranks that ended because another rank failed (see :meth:`ControlGroup.report_stopped`)."""
    return {r for r in range(world_size) if store.check([f"stopped/{r}"])}


def failure_reports(store, world_size: int) -> dict[int, str]:
    """The failures ranks reported so far, by rank."""
    if store.add("failures", 0) == 0:
        return {}
    return {r: store.get(f"failed/{r}").decode() for r in range(world_size) if store.check([f"failed/{r}"])}


class Watchdog:
    """A thread that beats this rank's heart in the store and watches ``ranks``' hearts and failure
    reports; ``on_failure(rank, reason)`` is called once, for the first problem seen."""

    def __init__(self, launch: Launch, store_factory: Callable, ranks: list[int],
                 on_failure: Callable[[int, str], None], timeout_s: float | None = None):
        self.launch = launch
        self._store = store_factory()   # its own connection: the main thread's may block in a wait
        self._ranks = ranks
        self._on_failure = on_failure
        self._timeout_s = timeout_s or seconds_from_env(HEARTBEAT_TIMEOUT_ENV, 30.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"anydev-watchdog{launch.rank}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen = {r: (-1, time.monotonic()) for r in self._ranks}
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            try:
                self._store.add(f"heartbeat/{self.launch.rank}", 1)
                reports = failure_reports(self._store, self.launch.world_size)
                beats = {r: self._store.add(f"heartbeat/{r}", 0) for r in self._ranks}
            except Exception as exc:  # the store is gone: its host (rank 0 or torchrun's agent) is
                if not self._stop.is_set():
                    self._fail(0, f"the c10d store at {self.launch.store_address} is gone ({_first_line(exc)}); "
                                  "rank 0's process (or its machine) ended")
                return
            others = {r: text for r, text in reports.items() if r != self.launch.rank}
            if others:
                rank = min(others)
                self._fail(rank, others[rank])
                return
            now = time.monotonic()
            for r, count in beats.items():
                last, since = seen[r]
                if count != last:
                    seen[r] = (count, now)
                elif now - since > self._timeout_s:
                    self._fail(r, f"no heartbeat for {self._timeout_s:g} s (the process hung or was stopped, or its "
                                  f"machine is unreachable; {HEARTBEAT_TIMEOUT_ENV} sets the wait)")
                    return

    def _fail(self, rank: int, reason: str) -> None:
        if not self._stop.is_set():
            self._on_failure(rank, reason)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def print_error(text: str) -> None:
    print(f"error: {text}", file=sys.stderr, flush=True)
