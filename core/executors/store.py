"""The group's c10d TCPStore: reaching it, and rank 0's reads of the replies, failure reports and stopped ranks.

The store at ``MASTER_ADDR:MASTER_PORT`` holds the replies to rank 0, the failure reports, the
heartbeats and where each rank runs.
"""
from __future__ import annotations

import pickle
import socket
import threading
import time
from datetime import timedelta

from .group_errors import LaunchError, first_line
from .launch import CONNECT_TIMEOUT_ENV, Launch

#: The longest pause between two looks for a rank's reply in the store.
REPLY_POLL_S = 0.05


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
            f"({first_line(exc)}): start rank 0 (or torchrun's node of the rendezvous endpoint), check "
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
