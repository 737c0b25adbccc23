"""Starting the rank processes of this machine (executor "mp") and killing what is left of them."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from datetime import timedelta

from .launch import CONNECT_TIMEOUT_ENV, Launch, seconds_from_env
from .store import connect_store


def spawn_ranks(world_size: int):
    """Start ranks 1..world_size-1 as processes of this machine, this process being rank 0: its
    :class:`Launch`, a client of the store it serves, the child processes and the store server."""
    import torch.distributed as dist

    timeout = seconds_from_env(CONNECT_TIMEOUT_ENV, 120.0)
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=timeout))
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
        return launch, store, children, server
    except BaseException:
        kill_ranks(children)
        raise


def kill_ranks(children: list) -> None:
    """Kill the child processes still running and reap them all."""
    for child in children:
        if child.poll() is None:
            child.kill()
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
