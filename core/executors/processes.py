"""The process executors: one process per rank, rank 0 (this process) drives.

* ``mp`` (:class:`MpExecutor`): one process per rank on this machine; this process is rank 0 and
  starts the others (``python -m anydev.core.executors.rank_process``) with torchrun's variables set,
  as torchrun would.
* ``torchrun`` (:class:`TorchrunExecutor`): one process per rank started by torchrun (or any launcher
  setting its variables), on any number of machines; the process of ``RANK=0`` builds the engine, the
  others run :func:`anydev.core.executors.rank_process.follow`.

In both, rank 0 drives (:class:`ProcessRanks`): the engine sees a :class:`LocalRank` (its own
RankWorker, whose every command is first broadcast to the others) and one :class:`RemoteRank` per
other process, whose futures resolve with that rank's reply, or, for the steps (no reply: the hot
path), are rank 0's own step's future. A rank that dies, hangs or fails fails every pending future with
:class:`~.dist.RankFailedError` naming it, and rank 0's communicators are aborted (contract 1.4, where
the backend can), so that its own thread, blocked in a collective with the failed rank, is freed.
The commands travel over :class:`~.dist.ControlGroup` (``send`` here, ``receive``/``reply`` in
:mod:`.rank_process`): the one seam a faster broadcast (a shared-memory queue) replaces.
"""
from __future__ import annotations

import os
import queue
import secrets
from collections import defaultdict, deque
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from dataclasses import replace
from types import SimpleNamespace
from typing import Callable

from anydev.core import interrupts

from ..errors import EngineConfigError, EngineInitError
from ..models.pipeline import RankLayout
from ..timeline import PhaseRecord
from .abort import ABORT_WAIT_S, abort_communicators, close_communicators
from .base import Executor, RankPlan
from .dist import (CONNECT_TIMEOUT_ENV, ControlGroup, Launch, LaunchError, RankFailedError, Watchdog,
                   check_local_device, check_world_size, connect_store, failure_reports, launch_from_env,
                   seconds_from_env, stopped_ranks, wait_reply)

#: Commands the engine gives every rank; any other goes to the one rank it is submitted to.
EVERY_RANK = frozenset({"init", "capture_graphs", "forward", "forward_stage", "release"})
#: Commands of the step loop: no reply (their futures end with rank 0's own); every other command
#: (init, graph capture, release, reads) waits for each rank's reply.
NO_REPLY = frozenset({"forward"})
#: After a failure, rank 0 still runs these on its own rank (to free its memory).
CLEANUP = frozenset({"release"})
#: How long rank 0 gathers reports after a first failure, so that the rank that failed first is named
#: rather than one that failed because of it.
GRACE_S = 1.0
#: Without child processes to watch (torchrun), how long a rank's heartbeat must stand still, after a
#: collective failed, for it to count as the rank gone (several beats of HEARTBEAT_INTERVAL_S).
STALL_S = 2.5
#: Step commands: rank 0's own one failing means the group is broken (a peer died or failed).
STEP_CALLS = frozenset({"forward", "forward_stage", "read_tokens"})


def checkpoint_source(checkpoint):
    """How another process opens the same checkpoint: its path, or the recipe of one built in code
    (``checkpoint.recipe``: a module-level function and its picklable arguments)."""
    recipe = getattr(checkpoint, "recipe", None)
    if recipe is not None:
        return recipe
    if checkpoint.source and os.path.exists(checkpoint.source):
        return os.path.abspath(checkpoint.source)
    raise EngineConfigError(f"the process executors open the checkpoint in every rank process, but {checkpoint.source!r} "
                            "is no path; pass a model directory or .gguf path (or the embedded demo)")


class ProcessExecutor(Executor):
    """Rank 0's side of a process executor: its own rank a thread here, the others processes."""

    def __init__(self, config, backend, layout: RankLayout):
        super().__init__(config, backend, layout)
        if not backend.runtime.cross_process_collectives:
            raise EngineConfigError(f"backend '{backend.name}' ({backend.runtime.hardware_label}) joins communicators of "
                                    f"one process only; executor {self.name!r} runs a process per rank: use "
                                    "executor='threads'")
        self.group: ProcessRanks | None = None

    def _group(self) -> "ProcessRanks":
        """The group of rank processes, formed (rank 0's side)."""
        raise NotImplementedError

    def start(self, plan: RankPlan, checkpoint, kernels, timeline, cancel) -> None:
        self.group = self._group()
        device = self.backend.device(self.group.local_rank)
        comm, pipe_comm = self.group.start(plan, checkpoint, device)
        self.communicators = [comm] + ([pipe_comm] if pipe_comm is not None else [])
        setup = plan.rank_setup(0, device, comm, checkpoint, kernels, pipe_comm)
        self.workers = self.group.workers(plan.worker_class(setup, timeline, cancel), timeline)
        self.wait_init(self.run("init"), cancel)

    @property
    def failure(self) -> BaseException | None:
        return self.group.failure if self.group is not None else None

    def close(self) -> list[BaseException]:
        """The other processes destroy their communicators while rank 0 does (see :meth:`ProcessRanks.close`)."""
        problems = self.release_workers()
        if self.group is not None:
            problems += self.group.close(lambda: close_communicators(self.communicators))
        self.workers, self.communicators = [], []
        return problems


class MpExecutor(ProcessExecutor):
    """``mp``: this process is rank 0 and starts ranks 1.. as processes of this machine."""

    name = "mp"

    def __init__(self, config, backend, layout: RankLayout):
        super().__init__(config, backend, layout)
        check_local_device(Launch(0, layout.world, 0, "127.0.0.1", 0), backend)

    def _group(self) -> "ProcessRanks":
        return ProcessRanks.spawn(self.layout.world)


class TorchrunExecutor(ProcessExecutor):
    """``torchrun``: every rank a process started by torchrun; this one is ``RANK=0``."""

    name = "torchrun"

    def __init__(self, config, backend, layout: RankLayout):
        super().__init__(config, backend, layout)
        launch = launch_from_env()
        if launch is None:
            raise LaunchError("executor='torchrun' needs the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, "
                              "MASTER_ADDR, MASTER_PORT): launch with torchrun, or use executor='mp' on one machine")
        if launch.rank != 0:
            raise LaunchError(f"this process is rank {launch.rank}: only rank 0 builds the engine; the other ranks run "
                              "anydev.core.executors.rank_process.follow() (test_infer.py and `anydev serve` do so "
                              "themselves)")
        check_world_size(launch, layout.tp, layout.pp)
        check_local_device(launch, backend)
        self._launch_env = launch

    def _group(self) -> "ProcessRanks":
        return ProcessRanks.launched(self._launch_env)


class ProcessRanks:
    """Rank 0's handle on the other rank processes of one engine."""

    _launched: "ProcessRanks | None" = None   # torchrun: one group per process, reused by every engine

    def __init__(self, launch: Launch, store, children: list | None = None, store_server=None):
        self.launch = launch
        self.local_rank = launch.local_rank
        self.world_size = launch.world_size
        self._store = store
        self._store_server = store_server
        self._children = children or []
        self._spawned = children is not None   # mp: this group started its processes and ends with its engine
        self._lock = threading.RLock()
        self._seq = 0
        self._pending: dict[int, list[tuple[str, Future]]] = {r: [] for r in range(1, self.world_size)}
        self._unresolved: set[Future] = set()   # futures a failure must end
        self._local: dict[str, deque] = defaultdict(deque)   # rank 0's calls not yet sent to the others
        self._replies: dict[int, queue.SimpleQueue] = {}     # per rank: (message, future) awaiting its reply
        self._failed = threading.Event()
        self._aborted = threading.Event()   # set once the judge has aborted rank 0's communicators
        self._failure_lock = threading.Lock()
        self.failure: RankFailedError | None = None
        self._comms: tuple = ()   # rank 0's communicators of the current engine, aborted on a failure
        self._closing = False
        timeout = seconds_from_env(CONNECT_TIMEOUT_ENV, 120.0)
        self.control = self._form_group(timeout)
        self._watchdog = Watchdog(launch, self._new_client, list(range(1, self.world_size)), self._on_failure)
        if self._children:
            threading.Thread(target=self._watch_children, name="anydev-children", daemon=True).start()

    # ---- start -------------------------------------------------------------------------------
    @classmethod
    def spawn(cls, world_size: int) -> "ProcessRanks":
        """Start ranks 1..world_size-1 as processes of this machine; this process is rank 0."""
        import torch.distributed as dist

        timeout = seconds_from_env(CONNECT_TIMEOUT_ENV, 120.0)
        server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                               timeout=__import__("datetime").timedelta(seconds=timeout))
        run_id = f"mp-{os.getpid()}-{secrets.token_hex(4)}/0"
        launch = Launch(0, world_size, 0, "127.0.0.1", server.port, run_id=run_id)
        env = dict(os.environ, WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(server.port),
                   TORCHELASTIC_RUN_ID=run_id[:-2], TORCHELASTIC_RESTART_COUNT="0", ANYDEV_PARENT_PID=str(os.getpid()))
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        children = []
        try:
            for rank in range(1, world_size):
                # A session of its own: a terminal's Ctrl-C (sent to the foreground process group) is rank
                # 0's to handle, even while the rank still imports; it dies with rank 0 (PDEATHSIG).
                children.append(subprocess.Popen([sys.executable, "-m", "anydev.core.executors.rank_process"],
                                                 env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                                                 start_new_session=True))
            store = connect_store(launch, timeout)
            return cls(launch, store, children, server)
        except BaseException:
            _kill(children)
            raise

    @classmethod
    def launched(cls, launch: Launch) -> "ProcessRanks":
        """This torchrun process's group (formed once; every engine of the process reuses it)."""
        group = cls._launched
        if group is not None and group.launch == launch and not group._failed.is_set():
            return group
        timeout = seconds_from_env(CONNECT_TIMEOUT_ENV, 120.0)
        server = None if launch.agent_store else connect_store(launch, timeout, serve=True)
        store = connect_store(launch, timeout)
        cls._launched = group = cls(launch, store, store_server=server)
        import atexit

        atexit.register(group.end)
        return group

    def _new_client(self):
        return connect_store(self.launch, seconds_from_env(CONNECT_TIMEOUT_ENV, 120.0))

    def _form_group(self, timeout: float) -> ControlGroup:
        """The control group, formed on a helper thread so that a child dying at start-up ends the wait."""
        formed: dict = {}

        def form():
            try:
                formed["group"] = ControlGroup(self.launch, self._store, timeout)
            except BaseException as exc:  # handed to the waiting thread below
                formed["error"] = exc

        thread = threading.Thread(target=form, name="anydev-control-group", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout + 5
        while thread.is_alive():
            try:
                interrupts.join(thread, 0.2)
            except interrupts.Interrupted:
                _kill(self._children)
                raise
            dead = [(r, c.returncode) for r, c in enumerate(self._children, 1) if c.poll() is not None]
            if dead or time.monotonic() > deadline:
                _kill(self._children)
                raise LaunchError(f"rank {dead[0][0]} exited with code {dead[0][1]} before joining the group of "
                                  f"{self.world_size} rank processes" if dead else
                                  f"the {self.world_size} rank processes did not all join within {timeout:g} s "
                                  f"({CONNECT_TIMEOUT_ENV} sets the wait)")
        if "error" in formed:
            _kill(self._children)
            raise formed["error"]
        return formed["group"]

    # ---- commands ------------------------------------------------------------------------------
    def start(self, plan: RankPlan, checkpoint, device):
        """Send every rank the plan (checkpoint and communicator unique ids added); return rank 0's
        (TP communicator, pipeline communicator or None) once every rank has built its rank and
        joined them."""
        unique_id = device.runtime.comm_unique_id()
        plan = replace(plan, checkpoint=checkpoint_source(checkpoint), unique_id=unique_id)
        if plan.config.pp > 1:
            plan = replace(plan, stage_unique_ids=(unique_id, *(device.runtime.comm_unique_id()
                                                               for _ in range(plan.config.pp - 1))),
                           pipe_unique_id=device.runtime.comm_unique_id())
        remote = self.setup(plan)
        joined = Future()

        def join():
            try:
                joined.set_result(plan.join_communicators(device, 0))
            except BaseException as exc:  # handed to the waiting thread
                joined.set_exception(exc)

        threading.Thread(target=join, name="anydev-comm-join", daemon=True).start()
        interrupts.wait([joined, *remote], return_when=FIRST_EXCEPTION)
        for rank, future in enumerate(remote, 1):
            if future.done() and future.exception() is not None:
                exc = future.exception()
                raise exc if isinstance(exc, (EngineInitError, RankFailedError)) else EngineInitError(rank, "device setup", exc)
        if joined.exception() is not None:
            raise EngineInitError(0, "device setup", joined.exception())
        self._comms = joined.result()
        if self._failed.is_set():   # judged while joining: abort now what the verdict could not
            abort_communicators(self._comms)
        return self._comms

    def setup(self, plan: RankPlan) -> list[Future]:
        """Send every rank the plan; each builds its rank and joins the communicator (futures: done)."""
        self._check()
        futures = self._broadcast(("setup", plan), "setup")
        return [f for _, f in futures]

    def workers(self, local_worker, timeline) -> list:
        """The engine's handle on every rank. Rank 0 alone (tp * pp = 1) is its bare worker, as on the
        threads executor: no other rank's failure to relay and no step message to pair its steps with."""
        if self.world_size == 1:
            return [local_worker]
        return [LocalRank(local_worker, self)] + [RemoteRank(r, self, timeline) for r in range(1, self.world_size)]

    def local_call(self, name: str, local: Future) -> Future:
        """Rank 0 runs ``name`` on its own rank (``local``): the future the engine gets. It fails
        with :class:`RankFailedError` when a rank fails meanwhile; for a command of every rank without
        reply it is the other ranks' future too (see :meth:`remote_future`)."""
        outer = Future()
        with self._lock:
            self._unresolved.add(outer)
            if name in EVERY_RANK and name in NO_REPLY:
                self._local[name].append(outer)
        local.add_done_callback(lambda done: self._local_done(outer, done, name))
        return outer

    def _local_done(self, outer: Future, local: Future, name: str = "") -> None:
        error = local.exception()
        if error is not None and name in STEP_CALLS:   # the group is broken: find the rank that broke it
            self._on_failure(0, f"{type(error).__name__}: {error}")
        if error is not None and self._failed.wait(2 * GRACE_S):
            failure = self._wait_verdict()   # rank 0's own error is most likely caused by the failed rank
            failure.add_note(f"rank 0 meanwhile: {type(error).__name__}: {error}")
            error = failure
        with self._lock:
            self._unresolved.discard(outer)
            if not outer.done():
                if error is not None:
                    outer.set_exception(error)
                else:
                    outer.set_result(local.result())

    def remote_future(self, rank: int, name: str, args: tuple) -> Future:
        """The future of ``name(*args)`` on rank ``rank``. A command of every rank (:data:`EVERY_RANK`)
        is sent to all of them at its first remote submit (with that rank's arguments: only rank 0's
        differ); the later ranks take their future of that message. Other commands go to one rank.
        A step without reply (:data:`NO_REPLY`) has rank 0's own future, which a failed rank fails."""
        self._check()
        with self._lock:
            for i, (pending, future) in enumerate(self._pending[rank]):
                if pending == name:
                    del self._pending[rank][i]
                    return future
        target = None if name in EVERY_RANK else rank
        made = self._broadcast(("call", name, args, None), name, target, claimer=rank)
        return dict(made)[rank]

    def _broadcast(self, message: tuple, name: str, target: int | None = None,
                   claimer: int | None = None) -> list[tuple[int, Future]]:
        with self._lock:
            self._seq += 1
            seq = self._seq
            wants_reply = name not in NO_REPLY
            try:
                self.control.send((seq, wants_reply, target) + message, interrupt=self._failed)
                sent_error = None
            except Exception as exc:
                sent_error = exc
            if sent_error is None:
                made = self._futures(seq, name, wants_reply, target, claimer)
        if sent_error is not None:
            # a rank of this machine that died or stopped reading is named by the queue (QueueError.rank)
            self._on_failure(getattr(sent_error, "rank", -1), f"sending '{name}' to the other ranks failed: {sent_error}")
            raise self._wait_verdict() from sent_error
        return made

    def _futures(self, seq: int, name: str, wants_reply: bool, target: int | None,
                 claimer: int | None) -> list[tuple[int, Future]]:
        """Under the lock: a future per rank the message went to; for a step without reply, rank 0's
        future of the same command (one future and no callback more per rank and step)."""
        ranks = [target] if target is not None else range(1, self.world_size)
        if wants_reply:
            made = [(rank, Future()) for rank in ranks]
            for rank, future in made:
                self._collector(rank).put((seq, future))
        else:
            step = self._local[name].popleft() if self._local[name] else _done(None)
            made = [(rank, step) for rank in ranks]
        if target is None and name in EVERY_RANK:
            for rank, future in made:
                if rank != claimer:
                    self._pending[rank].append((name, future))
        return made

    def _collector(self, rank: int) -> queue.SimpleQueue:
        """The queue of rank ``rank``'s awaited replies; a thread with its own store connection reads
        them in order (a rank answers its messages in the order sent)."""
        waiting = self._replies.get(rank)
        if waiting is None:
            waiting = self._replies[rank] = queue.SimpleQueue()
            threading.Thread(target=self._collect, args=(rank, waiting), daemon=True, name=f"anydev-replies{rank}").start()
        return waiting

    def _collect(self, rank: int, waiting: queue.SimpleQueue) -> None:
        client = None
        while True:
            seq, future = waiting.get()
            if future is None:
                return
            try:
                client = client or self._new_client()
                reply = wait_reply(client, seq, rank, self._failed)
            except Exception as exc:  # the store is gone: the rank's failure, once judged, says why
                self._on_failure(rank, f"its reply could not be read ({exc})")
                reply = None
            if reply is None:
                future.set_exception(self._wait_verdict())
                continue
            ok, value = reply
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    # ---- failures ------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._failed.is_set():
            raise self._wait_verdict()

    def _on_failure(self, rank: int, reason: str) -> None:
        """The first sign of a failed rank: gather what else was reported for a moment, name the rank
        that failed first, and fail every pending future."""
        with self._failure_lock:   # not self._lock: a command being sent to a hung rank holds it
            if self._failed.is_set() or self._closing:
                return
            self._failed.set()
        threading.Thread(target=self._judge, args=(rank, reason), daemon=True, name="anydev-judge").start()

    def _judge(self, rank: int, reason: str) -> None:
        try:
            self._judge_and_abort(rank, reason)
        finally:
            self._aborted.set()   # whatever happened: close() waits for this, not longer
        _kill(self._children)

    def _judge_and_abort(self, rank: int, reason: str) -> None:
        """Name the rank that failed, fail every pending future with it, and abort rank 0's communicators."""
        if self._children:
            time.sleep(GRACE_S)
            deaths = {r: f"its process (pid {c.pid}) exited with code {c.returncode}"
                         + (f" ({signal.Signals(-c.returncode).name})" if c.returncode < 0 else "")
                      for r, c in enumerate(self._children, 1) if c.poll() is not None}
        else:   # torchrun: processes of other machines; a rank whose heartbeat stopped is the one gone
            deaths = {r: f"its heartbeat stopped (the process died or hung; the group's collectives failed: {reason})"
                      for r in self._stalled(STALL_S)}
        try:
            client = self._new_client()
            reports, stopped = failure_reports(client, self.world_size), stopped_ranks(client, self.world_size)
        except Exception:
            reports, stopped = {}, set()
        if deaths:   # the first to die, not the first to notice: not one that ended because a peer had
            caused = {r for r in deaths if r in stopped or _lost_peers(reports.get(r, ""))}
            first = min(set(deaths) - caused or deaths)
            reason = deaths[first] + (f"; it reported: {reports[first]}" if first in reports else "")
        elif reports:   # a rank's own error before the collectives failed on its peers because of it
            primary = {r: text for r, text in reports.items() if not _lost_peers(text)} or reports
            first = min(primary)
            reason = primary[first]
        else:
            first = rank
        error = RankFailedError(first, reason + "; every rank of the group stopped")
        try:   # tell the ranks still alive (their watchdogs end them), on behalf of a rank that could not
            client = self._new_client()
            if not client.check([f"failed/{first}"]):
                client.set(f"failed/{first}", reason.encode())
                client.add("failures", 1)
        except Exception:  # the store is gone with its host: the ranks see their sockets close instead
            pass
        self.failure = error
        with self._lock:
            pending, self._unresolved = self._unresolved, set()
            for future in pending:
                if not future.done():
                    future.set_exception(error)
        for problem in abort_communicators(self._comms):   # rank 0's thread, blocked in a collective, is freed
            error.add_note(f"while aborting rank 0's communicators: {type(problem).__name__}: {problem}")

    def _stalled(self, seconds: float) -> list[int]:
        """The other ranks whose heartbeat did not move for ``seconds`` (several beats)."""
        try:
            client = self._new_client()
            before = {r: client.add(f"heartbeat/{r}", 0) for r in range(1, self.world_size)}
            time.sleep(seconds)
            return [r for r, beats in before.items() if client.add(f"heartbeat/{r}", 0) == beats]
        except Exception:  # the store is gone: no rank to name from it
            return []

    def _wait_verdict(self, timeout: float = STALL_S + 5) -> RankFailedError:
        deadline = time.monotonic() + timeout
        while self.failure is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.failure or RankFailedError(-1, "a rank process failed")

    def _watch_children(self) -> None:
        while not self._closing:
            for rank, child in enumerate(self._children, 1):
                if child.poll() is not None and not self._closing:
                    self._on_failure(rank, f"its process exited with code {child.returncode}")
                    return
            time.sleep(0.1)

    # ---- end -----------------------------------------------------------------------------------
    def close(self, close_local: Callable[[], list[BaseException]] = list) -> list[BaseException]:
        """End this engine's ranks (they free everything); an mp group's processes end too.

        ``close_local`` frees rank 0's communicators (returning the errors met) *after* the other
        ranks were told to close and *before* waiting for them: a collective library's destroy may
        wait for every rank of the communicator (NCCL's can, within a node), so rank 0 destroying
        first and then telling the others would wait forever."""
        problems, closing = [], []
        if not self._failed.is_set():
            try:
                closing = self._broadcast(("close",), "close")
            except Exception as exc:
                problems.append(exc)
        if self._failed.is_set():
            # After a failure, destroy rank 0's communicators only once the judge has aborted them:
            # destroying a live one whose peer died may never return (NCCL), and could race the abort.
            self._aborted.wait(max(GRACE_S, STALL_S) + ABORT_WAIT_S + 5)
        problems += close_local()
        for _, future in closing:
            try:
                future.result(timeout=60)
            except Exception as exc:
                problems.append(exc)
        if self._spawned:
            self.end()
        return problems

    def end(self) -> None:
        """Tell every rank process to exit (mp: wait for them, then kill what is left)."""
        if self._closing:
            return
        self._closing = True   # from here on a rank process that ends is no failure
        if not self._failed.is_set():
            try:
                with self._lock:
                    self._seq += 1
                    self.control.send((self._seq, False, None, "exit"))
            except Exception:  # a rank already gone: the kill below, or its own watchdog, ends it
                pass
        self._watchdog.stop()
        for waiting in self._replies.values():   # the reply readers end
            waiting.put((None, None))
        deadline = time.monotonic() + 10
        for child in self._children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        _kill(self._children)
        self.control.close()
        if ProcessRanks._launched is self:
            ProcessRanks._launched = None


class LocalRank:
    """Rank 0's own RankWorker, as the engine sees it: its futures fail when another rank does."""

    def __init__(self, worker, ranks: ProcessRanks):
        self._worker = worker
        self._ranks = ranks

    def __getattr__(self, name):
        return getattr(self._worker, name)

    def submit(self, fn, *args) -> Future:
        name = fn.__name__
        if self._ranks.failure is not None and name not in CLEANUP:   # after a failure: only free rank 0
            return _failed(self._ranks.failure)
        return self._ranks.local_call(name, self._worker.submit(fn, *args))


class _RemoteMethod:
    def __init__(self, name: str):
        self.__name__ = name


class RemoteRank:
    """Another rank's process, as the engine sees it (what the engine reads of a RankWorker)."""

    def __init__(self, rank: int, ranks: ProcessRanks, timeline):
        self.rank = rank
        self.kv = None
        self.weights = None
        self.kv_zero_device_ms = None
        self._ranks = ranks
        self._timeline = timeline

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _RemoteMethod(name)

    def submit(self, method, *args) -> Future:
        name = method.__name__
        if name in CLEANUP and self._ranks._failed.is_set():
            return _done([])   # the process is gone or about to be: nothing of it to free from here
        try:
            future = self._ranks.remote_future(self.rank, name, args)
        except Exception as exc:
            return _failed(exc)
        if name in NO_REPLY:   # a step: rank 0's own future (nothing comes back from this rank)
            return future
        outer = Future()
        future.add_done_callback(lambda done: self._unpack(done, outer))
        return outer

    def _unpack(self, done: Future, outer: Future) -> None:
        if done.exception() is not None:
            outer.set_exception(done.exception())
            return
        value = done.result()
        if isinstance(value, dict) and "state" in value:
            self._apply(value["state"])
            value = value["value"]
        outer.set_result(value)

    def _apply(self, state: dict) -> None:
        if state.get("kv_layout") is not None:
            self.kv = SimpleNamespace(layout=state["kv_layout"])
        self.kv_zero_device_ms = state.get("kv_zero_device_ms", self.kv_zero_device_ms)
        if state.get("weight_stats") is not None:
            self.weights = SimpleNamespace(stats=state["weight_stats"])
        offset = time.time() - time.perf_counter()   # records travel in wall-clock seconds
        with self._timeline._lock:
            self._timeline.records.extend(PhaseRecord(self.rank, phase, start - offset, end - offset)
                                          for phase, start, end in state.get("timeline", ()))

    def shutdown(self) -> None:
        """The process ends at the engine's close (``ProcessRanks.close``)."""


def _lost_peers(text: str) -> bool:
    """Whether a rank's failure report is a collective that failed because a peer did."""
    return any(sign in text for sign in ("lost its peers", "lost rank", "Connection reset", "Connection closed"))


def _done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


def _failed(error: BaseException) -> Future:
    future = Future()
    future.set_exception(error)
    return future


def _kill(children: list) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
