"""Rank 0's control group picks each rank's path by where it runs: the ranks of rank 0's machine read
the shared-memory queue, the others (here: a rank with ANYDEV_CONTROL_SHM=0, as in a container with
no shared /dev/shm) take a gloo broadcast; both get the same step."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import numpy as np

from anydev.core.executors.control_group import ControlGroup
from anydev.core.executors.launch import Launch
from anydev.core.executors.store import connect_store, wait_reply
from anydev.core.models.batch import StepBatch
from anydev.core.sched.sampling import SamplingParams

RANK = """
from anydev.core.executors.control_group import ControlGroup
from anydev.core.executors.launch import launch_from_env
from anydev.core.executors.store import connect_store
launch = launch_from_env()
group = ControlGroup(launch, connect_store(launch, 120), 120)
while True:
    seq, wants_reply, target, kind, *rest = group.receive()
    if kind == "exit":
        break
    batch, sampling, seeds, share, read, ended = rest[1]
    group.reply(seq, {"local": launch.rank in group.local_ranks, "tables": batch.block_tables.tolist(),
                      "sampling": sampling, "seeds": seeds, "ended": ended})
group.close()
"""


def test_ranks_of_rank_0s_machine_read_the_queue_and_the_others_take_gloo_the_same_step():
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120))
    launch = Launch(0, 3, 0, "127.0.0.1", server.port, run_id="anydev/0")   # as launch_from_env names it
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.update(WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(server.port), OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen([sys.executable, "-c", RANK], env=dict(env, RANK=str(r), LOCAL_RANK=str(r),
                                                                       **({"ANYDEV_CONTROL_SHM": "0"} if r == 2 else {})))
             for r in (1, 2)]
    try:
        store = connect_store(launch, 120)
        group = ControlGroup(launch, store, 120)
        assert (group.local_ranks, group.remote_ranks) == ([1], [2])
        B, M = 2, 3
        batch = StepBatch.pack(dict(input_ids=np.arange(B), positions=np.arange(B), slot_mapping=np.arange(B),
                                    last_index=np.arange(B), cu_seqlens_q=np.arange(B + 1), seq_lens=np.ones(B),
                                    block_tables=np.arange(B * M).reshape(B, M)), max_q_len=1)
        sampling = [SamplingParams(temperature=0.5, seed=9), None]
        group.send((1, True, None, "call", "forward", (batch, sampling, [(4, 9), None], False, None, (3,)), None))
        replies = {r: wait_reply(store, 1, r, threading.Event()) for r in (1, 2)}
        expected = {"tables": [[0, 1, 2], [3, 4, 5]], "sampling": sampling, "seeds": [(4, 9), None], "ended": (3,)}
        assert replies == {1: {"local": True, **expected}, 2: {"local": False, **expected}}
        group.send((2, False, None, "exit"))
        assert [r.wait(timeout=120) for r in ranks] == [0, 0]
        group.close()
    finally:
        for r in ranks:
            r.kill()
            r.wait(timeout=30)
    assert [p for p in Path("/dev/shm").iterdir() if p.name.startswith(f"anydev-{os.getpid()}-")] == []
