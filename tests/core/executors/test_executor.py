"""Process-per-rank execution on the cpu backend: executor="mp", two torchrun "nodes" on 127.0.0.1,
a rank killed mid-generation, and bad launches. Every child process runs under a timeout."""
from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from anydev.core import EngineConfig, EngineInitError, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.executors.group_errors import LaunchError, RankFailedError
from anydev.core.executors.launch import launch_from_env
from anydev.conformance.faults import failing_worker
from process_tree import descendants, still_running

ROOT = Path(__file__).resolve().parents[3]
TEST_INFER = ROOT / "examples" / "test_infer.py"
PROMPTS = ["Hello, world!", "the model of the device is"]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def tp1_tokens():
    with InferEngine(demo_checkpoint(), EngineConfig(tp=1)) as engine:
        return [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=NEW_TOKENS))]


def rank_processes() -> list[int]:
    """Pids of this process's children that run a rank (``anydev.core.executors.rank_process``), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), None)
        state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "")
        if parent == str(os.getpid()) and b"anydev.core.executors.rank_process" in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def test_mp_tp2_gives_the_tp1_tokens_and_one_timeline_of_both_ranks(tp1_tokens):
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, executor="mp")) as engine:
        children = [c.pid for c in engine.executor.group._children]
        assert len(children) == 1 and children[0] != os.getpid()
        assert rank_processes() == children
        tokens = [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=NEW_TOKENS))]
        phases = {(r.rank, r.phase) for r in engine.timeline}
    assert tokens == tp1_tokens
    assert {rank for rank, _ in phases} == {0, 1} and (1, "weights") in phases
    assert rank_processes() == []   # the rank process ended with the engine


def live_futures() -> int:
    gc.collect()
    return sum(isinstance(o, Future) for o in gc.get_objects())


def test_mp_at_tp1_gives_the_threads_tokens_keeps_nothing_per_step_and_ends_its_threads(tp1_tokens):
    # Rank 0 alone sends no step message: a step future kept to pair with one would pile up (two per
    # step), and the garbage collector's pauses with them.
    with InferEngine(demo_checkpoint(), EngineConfig(tp=1, executor="mp")) as engine:
        tokens = [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=NEW_TOKENS))]
        before = live_futures()
        engine.generate_ids([[1, 5, 9]], SamplingParams(max_new_tokens=64, ignore_eos=True))
        kept = live_futures() - before
    assert tokens == tp1_tokens
    assert kept < 8, f"{kept} futures outlived 64 steps"
    assert not [t.name for t in threading.enumerate() if t.name.startswith("anydev-watchdog")]   # the group ended


def test_mp_ranks_take_every_step_from_the_shared_memory_queue_without_pickle(tp1_tokens, monkeypatch):
    """The ranks of rank 0's machine read its messages from the shared-memory queue (no gloo group is
    formed for them): every step is written there, as a step message (b"S"), not a pickle."""
    from anydev.core.executors.shm_queue import MessageQueue

    kinds = []
    put = MessageQueue.put

    def counting_put(self, parts, *args, **kwargs):
        kinds.append(bytes(parts[0]))
        return put(self, parts, *args, **kwargs)

    monkeypatch.setattr(MessageQueue, "put", counting_put)
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, executor="mp")) as engine:
        control = engine.executor.group.control
        assert (control.local_ranks, control.remote_ranks) == ([1], [])
        outputs = engine.generate(PROMPTS, SamplingParams(max_new_tokens=NEW_TOKENS))
    assert [o.token_ids for o in outputs] == tp1_tokens
    assert kinds.count(b"S") >= NEW_TOKENS   # one step per new token at least (a prefill, then decodes)
    assert set(kinds) == {b"S", b"P"}        # setup, init, close: pickled


def test_rank_0_destroys_its_communicator_while_the_other_ranks_destroy_theirs():
    """A collective library's destroy may wait for every rank of the communicator (NCCL's can
    within a node): rank 0 must tell the other ranks to close before it destroys its own, or both
    wait forever. Here rank 0's destroy waits, as NCCL's can, until rank 1 has closed."""
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, executor="mp")) as engine:
        procs, [comm] = engine.executor.group, engine.communicators
        closing, seen = [], {}
        broadcast, destroy = procs._broadcast, comm.close

        def recording_broadcast(message, name, *args, **kwargs):
            made = broadcast(message, name, *args, **kwargs)
            if name == "close":
                closing.extend(future for _, future in made)
            return made

        def destroy_with_peers():
            deadline = time.monotonic() + 20
            while not (closing and all(f.done() for f in closing)) and time.monotonic() < deadline:
                time.sleep(0.05)
            seen["peers closed"] = bool(closing) and all(f.done() and f.exception() is None for f in closing)
            destroy()

        procs._broadcast, comm.close = recording_broadcast, destroy_with_peers
    assert seen == {"peers closed": True}, "rank 0 destroyed its communicator before rank 1 was told to close"
    assert rank_processes() == []


def test_a_failing_rank_process_names_itself_and_leaves_no_process():
    with pytest.raises(EngineInitError, match=r"rank 1 failed during 'weights'.*injected fault"):
        InferEngine(demo_checkpoint(), EngineConfig(tp=2, executor="mp", worker_cls=failing_worker(1, "weights")))
    assert rank_processes() == []


def generating_mp_engine(tp: int = 2) -> InferEngine:
    """A ``tp``-rank mp engine with one long request under way (a few steps run)."""
    engine = InferEngine(demo_checkpoint(), EngineConfig(tp=tp, executor="mp"))
    seq = engine.add_request([5, 9, 33, 70, 12], SamplingParams(max_new_tokens=200, ignore_eos=True))
    for _ in range(4):
        engine.step()
    assert len(seq.output) >= 2   # generation is under way (steps overlap: tokens lag a step)
    return engine


def step_until_failure(engine) -> RankFailedError:
    with pytest.raises(RankFailedError) as failure:
        for _ in range(200):   # bounded: the failure ends it long before the request does
            engine.step()
    return failure.value


def test_killing_a_rank_mid_generation_stops_the_run_naming_it():
    engine = generating_mp_engine()
    try:
        os.kill(engine.executor.group._children[0].pid, signal.SIGKILL)
        failure = step_until_failure(engine)
        assert failure.rank == 1
        assert "rank 1 failed" in str(failure) and "SIGKILL" in str(failure)
        # rank 0's own thread is free again (its collective with the dead rank ended: on NCCL by the
        # abort only; on cpu gloo also sees the closed sockets, so the hung-rank check below is the one
        # that only the abort passes)
        assert engine.workers[0]._worker.submit(lambda: "free").result(timeout=60) == "free"
    finally:
        engine.close()
    assert rank_processes() == []


def test_a_killed_rank_is_named_not_the_rank_that_lost_it_first():
    # rank 1's collectives fail on the dead rank 2 and it ends too, maybe before rank 0 looks
    engine = generating_mp_engine(tp=4)
    try:
        os.kill(engine.executor.group._children[1].pid, signal.SIGKILL)
        failure = step_until_failure(engine)
        assert failure.rank == 2 and "SIGKILL" in str(failure), failure
    finally:
        engine.close()
    assert rank_processes() == []


def test_after_a_failure_rank_0_destroys_only_aborted_communicators(monkeypatch):
    """Closing right after a failure waits for the abort of rank 0's communicators before destroying
    them: destroying a live one whose peer died may never return (NCCL), and would race the abort
    (made slow here, so that a close that does not wait for it destroys first)."""
    from anydev.core.executors import process_ranks
    abort = process_ranks.abort_communicators

    def slow_abort(comms, *args):
        time.sleep(1.5)
        return abort(comms, *args)

    monkeypatch.setattr(process_ranks, "abort_communicators", slow_abort)
    engine = generating_mp_engine()
    [comm] = engine.communicators
    destroy, aborted_at_destroy = comm.close, []

    def recording_destroy():
        aborted_at_destroy.append(comm.aborted)
        destroy()

    comm.close = recording_destroy
    try:
        os.kill(engine.executor.group._children[0].pid, signal.SIGKILL)
        step_until_failure(engine)
    finally:
        engine.close()   # at once, as a caller would after the error
    assert aborted_at_destroy == [True]
    assert rank_processes() == []


def test_a_hung_rank_is_named_and_rank_0s_own_thread_is_freed_by_the_abort(monkeypatch):
    """A rank that hangs mid-generation (SIGSTOP: its sockets stay open, so rank 0's all_reduce waits
    for it, on gloo until a long timeout, on NCCL forever) is named by its stopped heartbeat, and rank
    0 aborts its communicators (contract 1.4): its own worker thread is free again. The judge's kill
    of the hung process is held back, as for a rank of another machine (torchrun), so that only the
    abort can free rank 0."""
    from anydev.core.executors import process_ranks
    from anydev.plugin_api import load_backend

    monkeypatch.setenv("ANYDEV_DIST_HEARTBEAT_TIMEOUT", "4")
    monkeypatch.setattr(load_backend("cpu").runtime, "collective_timeout_s", 600.0)
    monkeypatch.setattr(process_ranks, "kill_ranks", lambda children: None)
    engine = generating_mp_engine()
    child = engine.executor.group._children[0]
    try:
        os.kill(child.pid, signal.SIGSTOP)
        failure = step_until_failure(engine)
        assert failure.rank == 1 and "no heartbeat" in str(failure), failure
        rank0 = engine.workers[0]._worker
        assert rank0.submit(lambda: "free").result(timeout=60) == "free"   # a hang detector: freed at once
    finally:
        child.kill()
        child.wait(timeout=30)
        engine.close()
    assert rank_processes() == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_nodes_give_the_tokens_of_one_process(tmp_path):
    prompt = "Hello, world!"
    with InferEngine(demo_checkpoint(), EngineConfig(tp=1)) as engine:
        [expected] = engine.generate([prompt], SamplingParams(max_new_tokens=NEW_TOKENS))
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--node-rank", str(node), "--max-restarts", "0",
         str(TEST_INFER), "--tp", "2", "--prompt", prompt, "--max-new-tokens", str(NEW_TOKENS)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path) for node in (0, 1)]
    try:
        logs = [node.communicate(timeout=240)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(logs)
    [driver] = [log for log in logs if "--- output 0" in log]   # the node that got rank 0 prints
    assert "x 2 rank(s) (torchrun)" in driver
    assert f"--- output 0 ({len(expected.token_ids)} tokens, {expected.finish_reason}) ---\n{expected.text}\n" in driver
    assert "tokens match the cpu reference: yes" in driver


# ---- bad launches: one typed line each ----------------------------------------------------------
def test_a_partial_torchrun_environment_is_a_launch_error():
    with pytest.raises(LaunchError, match="RANK, WORLD_SIZE set but LOCAL_RANK, MASTER_ADDR, MASTER_PORT not"):
        launch_from_env({"RANK": "0", "WORLD_SIZE": "2"})
    assert launch_from_env({}) is None


def run_test_infer(env_update: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", **env_update)
    return subprocess.run([sys.executable, str(TEST_INFER), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_a_world_size_that_is_not_tp_is_one_line():
    done = run_test_infer(dict(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                               MASTER_PORT=str(free_port())), "--tp", "2")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: WORLD_SIZE=3, but --tp 2 runs on 2 rank process(es): launch 2 in all (torchrun --nnodes N "
        "--nproc-per-node M with N x M = 2), or set --tp to 3"]


def test_an_unreachable_master_is_one_line():
    port = free_port()   # nobody listens there
    done = run_test_infer(dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                               ANYDEV_DIST_CONNECT_TIMEOUT="2"), "--tp", "2")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: rank 1 cannot reach the c10d store at 127.0.0.1:{port}"), done.stderr


def test_serve_with_the_mp_executor_answers_as_one_process_and_leaves_no_process():
    import json
    import urllib.request

    prompt = "the model of the device is"
    with InferEngine(demo_checkpoint(), EngineConfig(tp=1, max_model_len=256)) as engine:
        ids = engine.checkpoint.tokenizer.encode(prompt, add_special_tokens=True)
        [expected] = engine.generate_ids([ids], SamplingParams(max_new_tokens=NEW_TOKENS))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "anydev", "serve", "--device", "cpu", "--tp", "2", "--executor", "mp",
                               "--max-model-len", "256", "--port", str(port)], env=dict(os.environ, OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "anydev serve did not come up"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.3)
        below = descendants(server.pid)   # the engine core, its rank processes, multiprocessing's helpers
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in below]
        assert any(b"anydev.core.executors.rank_process" in command for command in commands), \
            "no rank process under anydev serve --executor mp"
        body = json.dumps({"model": "anydev-demo", "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0}).encode()
        answer = json.load(urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"}), timeout=120))
        assert answer["choices"][0]["text"] == expected.text
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=60)
        assert server.returncode == 0, out
        assert still_running(below) == []
    finally:
        server.kill()



def torchrun_workers(run_id: str) -> dict[int, int]:
    """RANK -> pid of the rank processes (not the torchrun agents) of the torchrun run ``run_id``."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"TORCHELASTIC_RUN_ID={run_id}".encode() in environ and b"torch.distributed.run" not in cmdline:
            rank = next((int(v.split(b"=")[1]) for v in environ if v.startswith(b"RANK=")), None)
            if rank is not None:
                found[rank] = int(entry.name)
    return found


def test_a_torchrun_rank_killed_mid_generation_is_named_by_rank_0(tmp_path):
    """Two torchrun nodes with static rendezvous: node 0 hosts the store and runs rank 0, so killing
    node 1's rank leaves rank 0 to name it (with c10d rendezvous either agent may host the store, and
    when the killed rank's agent does, torchrun ends rank 0 before it can report: see docs/multi-node.md)."""
    port, run_id = free_port(), f"kill-{os.getpid()}"
    env = dict(os.environ, OMP_NUM_THREADS="1", ANYDEV_DIST_HEARTBEAT_TIMEOUT="10")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    logs = [tmp_path / f"node{n}.log" for n in (0, 1)]
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend",
         "static", "--master-addr", "127.0.0.1", "--master-port", str(port), "--node-rank", str(n), "--rdzv-id", run_id,
         "--max-restarts", "0", str(TEST_INFER), "--tp", "2", "--batch-size", "4", "--max-new-tokens", "1000"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path) for n, log in enumerate(logs)]
    try:
        deadline = time.monotonic() + 120
        while "init timeline:" not in logs[0].read_text():   # rank 0 prints it, then generates
            assert time.monotonic() < deadline and all(n.poll() is None for n in nodes), [l.read_text() for l in logs]
            time.sleep(0.2)
        workers = torchrun_workers(run_id)
        assert sorted(workers) == [0, 1], workers
        os.kill(workers[1], signal.SIGKILL)
        for node in nodes:
            node.wait(timeout=120)
    finally:
        for node in nodes:
            node.kill()
    text = logs[0].read_text()
    assert [node.returncode != 0 for node in nodes] == [True, True]
    assert "error: rank 1 failed: its heartbeat stopped" in text, text[-4000:]
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers.values())
