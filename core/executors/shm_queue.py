"""One writer, N readers over shared memory: rank 0's messages to the rank processes of its machine.

The segment holds a ring of ``n_chunks`` chunks of ``chunk_bytes`` each (the idea of vLLM's
``shm_broadcast.MessageQueue``). Each chunk has a flag byte "written" and one flag byte "read" per
reader. The writer fills chunk i once every reader has read what it held, then raises "written"; each
reader takes chunk i once "written" is up and its own "read" is down, copies the message out and
raises its "read". Writer and readers go round the ring in the same order, so messages arrive in the
order sent, and the writer runs at most ``n_chunks`` messages ahead of the slowest reader.

A message larger than a chunk spills: it goes into a segment of its own, whose name the chunk
carries; the writer unlinks it at its next message after every reader has read it (or at
:meth:`close`).

Waiting: readers spin (yielding the core) for ``SPIN_S`` after their last message, then sleep
between looks, longer the longer they idle (``SLEEP_S`` up to ``MAX_SLEEP_S``: a thousandth of
the time idle), so an idle rank costs next to nothing and a busy one reads within
microseconds. Every wait is watched: the writer never waits past ``timeout_s`` for a reader (a reader
that died or stopped reading is named, by rank, in :class:`ReaderGone` / :class:`ReaderStuck`), and a
reader sees a writer that closed or died (:class:`WriterGone`).

Once every reader has attached, the writer unlinks the ring's name (:meth:`unlink`): the memory lives
on while mapped, and nothing is left in /dev/shm even if a process is killed (but for a spilled
message not yet read, which is rare: steps are far smaller than a chunk). No segment is handed to
multiprocessing's resource tracker, which would be a process of its own.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import struct
import sys
import threading
import time
from multiprocessing import resource_tracker, shared_memory
from typing import Callable, Sequence

from anydev.plugin_api.errors import AnydevError

#: Seconds a reader spins (yielding the core) after a message before it starts sleeping between looks.
#: Short: a spinning thread holds the GIL against its process's other threads, and a rank process's
#: step may run on those (the cpu backend's streams), so a long spin slows the very step it waits on.
SPIN_S = 0.0002
#: Seconds a reader or a waiting writer sleeps between looks once past its spin, at first.
SLEEP_S = 0.00005
#: The longest sleep between looks (reached after seconds of idling).
MAX_SLEEP_S = 0.005
#: How often a waiting reader or writer looks whether its peer process is still there.
CHECK_S = 0.1
CHUNK_BYTES = 1 << 20
N_CHUNKS = 8

_MAGIC = 0x414E5951   # "ANYQ"
_HEADER = struct.Struct("<IIIQQB")   # magic, readers, chunks, chunk bytes, writer pid, closed
_PID = struct.Struct("<Q")
_MESSAGE = struct.Struct("<QB")     # length, spilled; a spilled message's segment name follows
_NAME_BYTES = 64
_fence_lock = threading.Lock()
_untracked_lock = threading.Lock()


class QueueError(AnydevError):
    """The message queue between rank 0 and the rank processes of its machine broke. ``rank`` names
    the rank process concerned (the writer is rank 0)."""

    def __init__(self, rank: int, text: str):
        self.rank = rank
        super().__init__(text)

    def __reduce__(self):
        return type(self), (self.rank, str(self))


class ReaderGone(QueueError):
    """A reader's process ended while the writer waited for it to read."""


class ReaderStuck(QueueError):
    """A reader read nothing for the writer's whole wait (hung, stopped, or busy far too long)."""


class WriterGone(QueueError):
    """The writer (rank 0) closed the queue or its process ended."""


class Interrupted(QueueError):
    """The writer's wait was cut short by its ``interrupt`` event (a failure seen elsewhere)."""


def _fence() -> None:
    """A full memory barrier (a lock's acquire and release are one on every platform), so that the
    flag stores are seen after the data they guard."""
    _fence_lock.acquire()
    _fence_lock.release()


class MessageQueue:
    """One end of the queue: the writer (:meth:`create`) or one reader (:meth:`attach`)."""

    def __init__(self, shm: shared_memory.SharedMemory, reader: int | None, ranks: Sequence[int]):
        self._shm = shm
        self._buf = shm.buf
        magic, n_readers, n_chunks, chunk_bytes, self.writer_pid, _ = _HEADER.unpack_from(self._buf, 0)
        if magic != _MAGIC:
            raise QueueError(-1, f"shared-memory segment {shm.name!r} is no anydev message queue")
        self.name = shm.name
        self.reader = reader
        self.ranks = list(ranks) if ranks else list(range(1, n_readers + 1))
        self.n_readers, self.n_chunks, self.chunk_bytes = n_readers, n_chunks, chunk_bytes
        self._pids_at = _HEADER.size
        self._flags_at = self._pids_at + _PID.size * n_readers
        self._data_at = self._flags_at + (1 + n_readers) * n_chunks
        self._index = 0          # the next chunk to write (writer) or read (this reader)
        self._spills: dict[int, shared_memory.SharedMemory] = {}   # writer: chunk -> its spilled message
        self._spill_count = 0
        self._linked = True
        self._closed = False
        self._last_message = time.monotonic()

    # ---- making and joining -------------------------------------------------------------------
    @classmethod
    def create(cls, ranks: Sequence[int], chunk_bytes: int = CHUNK_BYTES, n_chunks: int = N_CHUNKS) -> "MessageQueue":
        """The writer's end, for readers that are ranks ``ranks`` (reader i is ``ranks[i]``)."""
        if not ranks or chunk_bytes < _MESSAGE.size + _NAME_BYTES or n_chunks < 1:
            raise ValueError(f"a queue needs readers, chunks of at least {_MESSAGE.size + _NAME_BYTES} bytes and "
                             f"one chunk at least: {len(ranks)} reader(s), {n_chunks} x {chunk_bytes} bytes")
        n = len(ranks)
        size = _HEADER.size + _PID.size * n + (1 + n) * n_chunks + chunk_bytes * n_chunks
        shm = _segment(f"anydev-{os.getpid()}-{secrets.token_hex(4)}", size)
        shm.buf[:_HEADER.size + _PID.size * n + (1 + n) * n_chunks] = bytes(_HEADER.size + _PID.size * n + (1 + n) * n_chunks)
        _HEADER.pack_into(shm.buf, 0, _MAGIC, n, n_chunks, chunk_bytes, os.getpid(), 0)
        return cls(shm, None, ranks)

    @classmethod
    def attach(cls, name: str, reader: int, rank: int | None = None) -> "MessageQueue":
        """Reader ``reader``'s end of the queue named ``name`` (its rank, for messages: ``rank``)."""
        queue = cls(_segment(name), reader, [])
        if not 0 <= reader < queue.n_readers:
            queue.close()
            raise ValueError(f"reader {reader} of a queue of {queue.n_readers} reader(s)")
        if rank is not None:
            queue.ranks[reader] = rank
        _PID.pack_into(queue._buf, queue._pids_at + _PID.size * reader, os.getpid())
        return queue

    def wait_for_readers(self, timeout_s: float) -> None:
        """Writer: wait until every reader has attached; a :class:`ReaderStuck` naming the missing ones
        after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while missing := [self.ranks[i] for i in range(self.n_readers) if not self._pid(i)]:
            if time.monotonic() > deadline:
                raise ReaderStuck(missing[0], f"rank(s) {', '.join(map(str, missing))} did not attach to the message "
                                              f"queue {self.name!r} within {timeout_s:g} s")
            time.sleep(0.01)

    def unlink(self) -> None:
        """Writer: remove the ring's name (every reader has attached; the memory stays while mapped)."""
        if self._linked:
            self._linked = False
            _unlink(self._shm)

    # ---- writer -------------------------------------------------------------------------------
    def put(self, parts: Sequence, timeout_s: float, interrupt: threading.Event | None = None) -> None:
        """Write one message, the concatenation of the bytes-like ``parts``. Waits for a free chunk at
        most ``timeout_s`` (then :class:`ReaderStuck`); a reader that died meanwhile is
        :class:`ReaderGone`; ``interrupt`` set meanwhile is :class:`Interrupted`."""
        buf, i = self._buf, self._index
        flags = self._flags_at + (1 + self.n_readers) * i
        self._wait_free(flags, timeout_s, interrupt)
        if self._spills:
            self._free_spills()
        buf[flags] = 0
        _fence()
        parts = [memoryview(p).cast("B") for p in parts]
        length = sum(p.nbytes for p in parts)
        at = self._data_at + self.chunk_bytes * i
        if _MESSAGE.size + length <= self.chunk_bytes:
            _MESSAGE.pack_into(buf, at, length, 0)
            _write(buf, at + _MESSAGE.size, parts)
        else:
            self._spill_count += 1
            spill = _segment(f"{self.name}-s{self._spill_count}", max(length, 1))
            _write(spill.buf, 0, parts)
            self._spills[i] = spill
            _MESSAGE.pack_into(buf, at, length, 1)
            name = spill.name.encode()
            buf[at + _MESSAGE.size:at + _MESSAGE.size + _NAME_BYTES] = name.ljust(_NAME_BYTES, b"\0")
        buf[flags + 1:flags + 1 + self.n_readers] = bytes(self.n_readers)
        _fence()
        buf[flags] = 1
        self._index = (i + 1) % self.n_chunks

    def _free_spills(self, every: bool = False) -> None:
        """Unlink the spilled messages every reader has read (``every``: all of them)."""
        done = b"\1" * self.n_readers
        for i, spill in list(self._spills.items()):
            flags = self._flags_at + (1 + self.n_readers) * i
            if every or self._buf[flags + 1:flags + 1 + self.n_readers] == done:
                del self._spills[i]
                spill.close()
                _unlink(spill)

    def _wait_free(self, flags: int, timeout_s: float, interrupt: threading.Event | None) -> None:
        buf, n, done = self._buf, self.n_readers, b"\1" * self.n_readers

        def check(waited: float) -> None:
            behind = [r for r in range(n) if not buf[flags + 1 + r]]
            if interrupt is not None and interrupt.is_set():
                raise Interrupted(self.ranks[behind[0]], "the message queue's writer stopped waiting: a failure was seen")
            for r in behind:
                pid = self._pid(r)
                if pid and not _alive(pid):
                    raise ReaderGone(self.ranks[r], f"rank {self.ranks[r]} (pid {pid}) exited before reading rank 0's "
                                                    "message")
            if waited > timeout_s:
                names = ", ".join(str(self.ranks[r]) for r in behind)
                raise ReaderStuck(self.ranks[behind[0]],
                                  f"rank(s) {names} read none of rank 0's last {self.n_chunks} message(s) within "
                                  f"{timeout_s:g} s (hung, stopped, or busy far too long)")

        _wait(lambda: not buf[flags] or buf[flags + 1:flags + 1 + n] == done, time.monotonic(), check)

    # ---- reader -------------------------------------------------------------------------------
    def get(self, timeout_s: float | None = None) -> bytearray:
        """Reader: the next message (its own copy). Waits for it (at most ``timeout_s``: then
        :class:`ReaderStuck`); a writer that closed or died is :class:`WriterGone`."""
        buf, i, r = self._buf, self._index, self.reader
        flags = self._flags_at + (1 + self.n_readers) * i
        if not (buf[flags] and not buf[flags + 1 + r]):
            self._wait_message(flags, flags + 1 + r, timeout_s)
        _fence()
        at = self._data_at + self.chunk_bytes * i
        length, spilled = _MESSAGE.unpack_from(buf, at)
        if spilled:
            name = bytes(buf[at + _MESSAGE.size:at + _MESSAGE.size + _NAME_BYTES]).rstrip(b"\0").decode()
            spill = _segment(name)
            try:
                message = bytearray(spill.buf[:length])
            finally:
                spill.close()
        else:
            message = bytearray(buf[at + _MESSAGE.size:at + _MESSAGE.size + length])
        _fence()
        buf[flags + 1 + r] = 1
        self._index = (i + 1) % self.n_chunks
        self._last_message = time.monotonic()
        return message

    def _wait_message(self, written: int, mine: int, timeout_s: float | None) -> None:
        buf = self._buf

        def check(waited: float) -> None:
            if buf[_HEADER.size - 1]:
                raise WriterGone(0, f"rank 0 closed the message queue {self.name!r}")
            if not _alive(self.writer_pid):
                raise WriterGone(0, f"rank 0's process (pid {self.writer_pid}) ended")
            if timeout_s is not None and waited > timeout_s:
                raise ReaderStuck(self.ranks[self.reader], f"no message from rank 0 within {timeout_s:g} s")

        _wait(lambda: buf[written] and not buf[mine], self._last_message, check)

    # ---- end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Writer: tell the readers, free the spilled messages and the ring's name. Either end: unmap."""
        if self._closed:
            return
        self._closed = True
        if self.reader is None:
            self._buf[_HEADER.size - 1] = 1
            self._free_spills(every=True)
            self.unlink()
        self._buf = None
        self._shm.close()

    def _pid(self, reader: int) -> int:
        return _PID.unpack_from(self._buf, self._pids_at + _PID.size * reader)[0]


def _wait(ready: Callable[[], bool], spin_from: float, check: Callable[[float], None]) -> None:
    """Until ``ready()``: spin (yielding the core) up to ``SPIN_S`` after ``spin_from``, then sleep
    between looks (a thousandth of the time since ``spin_from``, within ``SLEEP_S``..``MAX_SLEEP_S``);
    every ``CHECK_S``, ``check(seconds waited)`` may end the wait by raising."""
    start = next_check = time.monotonic()
    while not ready():
        now = time.monotonic()
        if now - spin_from < SPIN_S:
            os.sched_yield()
        else:
            time.sleep(min(MAX_SLEEP_S, max(SLEEP_S, (now - spin_from) / 1000)))
        if now >= next_check:
            next_check = now + CHECK_S
            check(now - start)


def _write(buf: memoryview, at: int, parts: Sequence[memoryview]) -> None:
    for part in parts:
        buf[at:at + part.nbytes] = part
        at += part.nbytes


def _segment(name: str, size: int = 0) -> shared_memory.SharedMemory:
    """Make (``size`` > 0) or map the segment ``name``, kept out of multiprocessing's resource tracker:
    a tracker is a process of its own that outlives ours, and it unlinks at its end what a reader
    merely mapped. The writer unlinks what it made (the ring once every reader has attached, a spill
    once read, all at :meth:`MessageQueue.close`)."""
    create = size > 0
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, create=create, size=size, track=False)
    with _untracked():
        return shared_memory.SharedMemory(name=name, create=create, size=size)


def _unlink(shm: shared_memory.SharedMemory) -> None:
    """Remove the name of a segment :func:`_segment` made (its mapping stays)."""
    with _untracked():
        shm.unlink()


@contextlib.contextmanager
def _untracked():
    """Before Python 3.13, ``SharedMemory`` registers every segment it makes or maps with the resource
    tracker (starting one) and unregisters it at ``unlink``: both are skipped meanwhile. (From 3.13
    ``track=False`` says so.)"""
    with _untracked_lock:
        register, unregister = resource_tracker.register, resource_tracker.unregister
        resource_tracker.register = resource_tracker.unregister = lambda name, rtype: None
        try:
            yield
        finally:
            resource_tracker.register, resource_tracker.unregister = register, unregister


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited one not yet reaped by its parent counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:   # no /proc here: ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
