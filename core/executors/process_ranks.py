"""Rank 0's handle on the other rank processes of one engine: their start, the commands and replies, a failure, the end.

Rank 0's own rank runs its commands here; each command is first broadcast to the others over
:class:`~.control_group.ControlGroup` (``send`` here, ``receive``/``reply`` in :mod:`.rank_process`):
the one seam a faster broadcast replaces. A rank that dies, hangs or fails fails every pending future
with :class:`~.group_errors.RankFailedError` naming it (:mod:`.failure_judge`), and rank 0's
communicators are aborted (contract 1.4, where the backend can), so that its own thread, blocked in
a collective with the failed rank, is freed.
"""
from __future__ import annotations

import os
import queue
from collections import defaultdict, deque
import subprocess
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future
from dataclasses import replace
from typing import Callable

from anydev.core import interrupts

from ..errors import EngineConfigError, EngineInitError
from .abort import ABORT_WAIT_S, abort_communicators
from .base import RankPlan
from .control_group import ControlGroup
from .failure_judge import GRACE_S, STALL_S, find_deaths, first_failure
from .futures import done
from .group_errors import LaunchError, RankFailedError
from .launch import CONNECT_TIMEOUT_ENV, Launch, seconds_from_env
from .rank_commands import EVERY_RANK, NO_REPLY, STEP_CALLS
from .rank_proxies import LocalRank, RemoteRank
from .spawning import kill_ranks, spawn_ranks
from .store import connect_store, failure_reports, stopped_ranks, wait_reply
from .watchdog import Watchdog


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
        launch, store, children, server = spawn_ranks(world_size)
        try:
            return cls(launch, store, children, server)
        except BaseException:
            kill_ranks(children)
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
                kill_ranks(self._children)
                raise
            dead = [(r, c.returncode) for r, c in enumerate(self._children, 1) if c.poll() is not None]
            if dead or time.monotonic() > deadline:
                kill_ranks(self._children)
                raise LaunchError(f"rank {dead[0][0]} exited with code {dead[0][1]} before joining the group of "
                                  f"{self.world_size} rank processes" if dead else
                                  f"the {self.world_size} rank processes did not all join within {timeout:g} s "
                                  f"({CONNECT_TIMEOUT_ENV} sets the wait)")
        if "error" in formed:
            kill_ranks(self._children)
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
            step = self._local[name].popleft() if self._local[name] else done(None)
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
        kill_ranks(self._children)

    def _judge_and_abort(self, rank: int, reason: str) -> None:
        """Name the rank that failed, fail every pending future with it, and abort rank 0's communicators."""
        deaths = find_deaths(self._children, self._new_client, self.world_size, reason)
        try:
            client = self._new_client()
            reports, stopped = failure_reports(client, self.world_size), stopped_ranks(client, self.world_size)
        except Exception:
            reports, stopped = {}, set()
        first, reason = first_failure(deaths, reports, stopped, rank, reason)
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
        kill_ranks(self._children)
        self.control.close()
        if ProcessRanks._launched is self:
            ProcessRanks._launched = None
