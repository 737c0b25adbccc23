"""The shared-memory message queue of rank 0 to the rank processes of its machine
(``anydev.core.executors.shm_queue``): order round the ring, spills, failures named, nothing left in
/dev/shm. Reader processes are forked (they touch only the queue) and run under timeouts."""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import threading
from pathlib import Path

import pytest

from anydev.core.executors.shm_queue import (Interrupted, MessageQueue, ReaderGone, ReaderStuck, WriterGone)

SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm on this machine")
FORK = multiprocessing.get_context("fork")


def segments(prefix: str) -> list[str]:
    return sorted(p.name for p in SHM.iterdir() if p.name.startswith(prefix))


def message(i: int) -> bytes:
    """Message i: sizes from empty to several chunks (the ring's chunks below are 256 bytes)."""
    return bytes((i * 7 + j) % 251 for j in range((i * 97) % 1100))


def read_and_hash(name: str, reader: int, rank: int, count: int, out) -> None:
    queue = MessageQueue.attach(name, reader, rank)
    out.send([hashlib.sha256(queue.get(timeout_s=120)).hexdigest() for _ in range(count)])
    queue.close()


def attach_and_wait(name: str, reader: int, rank: int, ready) -> None:
    MessageQueue.attach(name, reader, rank)
    ready.send(True)
    threading.Event().wait(120)   # never reads


def test_every_reader_gets_every_message_in_order_round_the_ring():
    count = 60
    queue = MessageQueue.create([1, 2, 3], chunk_bytes=256, n_chunks=4)
    pipes = [FORK.Pipe(duplex=False) for _ in range(3)]
    readers = [FORK.Process(target=read_and_hash, args=(queue.name, i, i + 1, count, pipes[i][1]), daemon=True)
               for i in range(3)]
    try:
        for reader in readers:
            reader.start()
        queue.wait_for_readers(60)
        queue.unlink()
        for i in range(count):   # 15 times round the ring, held back by the slowest reader
            queue.put([message(i)[:5], message(i)[5:]], timeout_s=120)
        expected = [hashlib.sha256(message(i)).hexdigest() for i in range(count)]
        for receive, _ in pipes:
            assert receive.poll(120)
            assert receive.recv() == expected
    finally:
        queue.close()
        for reader in readers:
            reader.kill()
            reader.join(30)
    assert segments(queue.name) == []


def test_a_big_message_spills_into_a_segment_of_its_own_freed_once_read():
    queue = MessageQueue.create([1], chunk_bytes=256, n_chunks=2)
    reader = MessageQueue.attach(queue.name, 0)
    try:
        big = os.urandom(100_000)
        queue.put([big], timeout_s=10)
        assert segments(f"{queue.name}-s") == [f"{queue.name}-s1"]
        assert reader.get(timeout_s=10) == big
        for small in (b"a", b"b"):   # round the ring: the writer takes the spilled message's chunk back
            queue.put([small], timeout_s=10)
            assert reader.get(timeout_s=10) == small
        assert segments(f"{queue.name}-s") == []
        queue.put([big], timeout_s=10)   # unread when the queue closes: freed all the same
    finally:
        reader.close()
        queue.close()
    assert segments(queue.name) == []


def test_the_rings_name_goes_once_every_reader_attached_and_the_queue_still_works():
    queue = MessageQueue.create([1, 2], chunk_bytes=256, n_chunks=2)
    readers = [MessageQueue.attach(queue.name, i) for i in range(2)]
    try:
        queue.wait_for_readers(10)
        queue.unlink()
        assert segments(queue.name) == []
        queue.put([b"step"], timeout_s=10)
        assert [r.get(timeout_s=10) for r in readers] == [b"step", b"step"]
    finally:
        for reader in readers:
            reader.close()
        queue.close()


def test_a_reader_that_never_attached_is_named():
    queue = MessageQueue.create([4, 5], chunk_bytes=256, n_chunks=2)
    MessageQueue.attach(queue.name, 0).close()
    try:
        with pytest.raises(ReaderStuck, match=r"rank\(s\) 5 did not attach") as caught:
            queue.wait_for_readers(0.3)
        assert caught.value.rank == 5
    finally:
        queue.close()


def test_a_dead_reader_is_named_by_its_rank_and_the_writer_does_not_wait_for_it():
    queue = MessageQueue.create([7], chunk_bytes=256, n_chunks=2)
    receive, send = FORK.Pipe(duplex=False)
    reader = FORK.Process(target=attach_and_wait, args=(queue.name, 0, 7, send), daemon=True)
    reader.start()
    try:
        assert receive.poll(60) and receive.recv()
        os.kill(reader.pid, signal.SIGKILL)
        queue.put([b"1"], timeout_s=600)
        queue.put([b"2"], timeout_s=600)   # the ring is full now
        with pytest.raises(ReaderGone, match=rf"rank 7 \(pid {reader.pid}\) exited") as caught:
            queue.put([b"3"], timeout_s=60)   # named long before the bound
        assert caught.value.rank == 7
    finally:
        reader.kill()
        reader.join(30)
        queue.close()


def test_a_reader_that_stops_reading_is_named_once_the_writers_wait_runs_out():
    queue = MessageQueue.create([1, 2], chunk_bytes=256, n_chunks=2)
    readers = [MessageQueue.attach(queue.name, i) for i in range(2)]
    try:
        for i in range(2):
            queue.put([b"%d" % i], timeout_s=10)
            readers[0].get(timeout_s=10)   # rank 1 keeps up, rank 2 reads nothing
        with pytest.raises(ReaderStuck, match=r"rank\(s\) 2 read none") as caught:
            queue.put([b"2"], timeout_s=0.3)
        assert caught.value.rank == 2
    finally:
        for reader in readers:
            reader.close()
        queue.close()


def test_an_interrupt_ends_the_writers_wait_naming_the_rank_behind():
    queue = MessageQueue.create([3], chunk_bytes=256, n_chunks=1)
    reader = MessageQueue.attach(queue.name, 0)
    interrupt = threading.Event()
    try:
        queue.put([b"0"], timeout_s=10)
        threading.Timer(0.2, interrupt.set).start()
        with pytest.raises(Interrupted) as caught:
            queue.put([b"1"], timeout_s=600, interrupt=interrupt)
        assert caught.value.rank == 3
    finally:
        reader.close()
        queue.close()


def test_a_reader_sees_the_writer_close():
    queue = MessageQueue.create([1], chunk_bytes=256, n_chunks=2)
    reader = MessageQueue.attach(queue.name, 0)
    queue.put([b"last"], timeout_s=10)
    queue.close()
    try:
        assert reader.get(timeout_s=10) == b"last"   # what was sent before the close still arrives
        with pytest.raises(WriterGone, match="closed"):
            reader.get(timeout_s=60)
    finally:
        reader.close()


def write_then_die(out) -> None:
    queue = MessageQueue.create([1], chunk_bytes=256, n_chunks=2)
    out.send(queue.name)
    queue.wait_for_readers(60)
    queue.unlink()
    os._exit(0)   # no close: as if killed


def test_a_reader_sees_the_writers_process_end_and_nothing_is_left_in_dev_shm():
    receive, send = FORK.Pipe(duplex=False)
    writer = FORK.Process(target=write_then_die, args=(send,), daemon=True)
    writer.start()
    try:
        assert receive.poll(60)
        name = receive.recv()
        reader = MessageQueue.attach(name, 0)
        with pytest.raises(WriterGone, match=rf"pid {writer.pid}\) ended"):
            reader.get(timeout_s=120)
        reader.close()
    finally:
        writer.kill()
        writer.join(30)
    assert segments(name) == []
