"""Send SIGINT/SIGTERM to ``examples/test_infer.py`` at random moments; count hangs and wrong exits.

    python scripts/signal_stress.py --executor threads --target rank0 --runs 100
    python scripts/signal_stress.py --executor mp --target group --runs 100 --signals INT

Each run starts the demo model at ``--tp`` ranks in a process group of its own, waits a random time
between 0 and ``--max-delay`` seconds (default: the length of one run without a signal, measured
first, so that signals land in start-up, prefill, decode and close alike), then signals rank 0
(``--target rank0``: the test_infer.py process, which is rank 0 for the threads and mp executors)
or every process of the group (``--target group``, as a terminal's Ctrl-C does). The run must then
end within ``--deadline`` seconds with exit code 128 + the signal (130, 143), print exactly one line
on stderr (``interrupted`` or ``terminated``; progress bars aside) and leave no process of its
group (or under rank 0: the mp rank processes have sessions of their own) running. One that ends as it must but after the deadline is counted as slow (a starved
process on a loaded machine); one still running after ``--hang`` seconds as hung, with its threads'
stacks. A run that ended before its signal was sent, or ran to its end with exit code 0 and nothing on
stderr (the signal came while it exited), proves nothing and is not counted.

It prints one line per run (what went wrong, in full, for a failed one) and a summary; exit code 1 when any run failed. Meant for a loaded
machine (run it under ``nice``); CI runs only the deterministic tests (tests/core/test_interrupts.py).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINES = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--executor", choices=("threads", "mp"), default="threads")
    p.add_argument("--target", choices=("rank0", "group"), default="rank0")
    p.add_argument("--signals", default="INT,TERM", help="comma-separated, one picked at random per run (default INT,TERM)")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--max-delay", type=float, default=None, help="seconds (default: one unsignalled run's length)")
    p.add_argument("--deadline", type=float, default=5.0, help="seconds a signalled run has to end (default 5)")
    p.add_argument("--hang", type=float, default=60.0,
                   help="seconds after which a signalled run counts as hung, not slow, and its stacks are dumped (default 60)")
    p.add_argument("--seed", type=int, default=None)
    return p.parse_args(argv)


def command(args) -> list[str]:
    return [sys.executable, "-u", str(ROOT / "examples" / "test_infer.py"), "--tp", str(args.tp), "--executor",
            args.executor, "--max-new-tokens", str(args.max_new_tokens), "--no-chat-template", "--prompt", "hi"]


def start(args, err) -> subprocess.Popen:
    env = dict(os.environ, PYTHONFAULTHANDLER="1")   # a hung run's threads are dumped (SIGABRT) for the report
    return subprocess.Popen(command(args), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, env=env)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def descendants(pid: int) -> set[int]:
    """The processes under ``pid`` (rank processes live in sessions of their own: not in its group)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found |= {child} | descendants(child)
    return found


def running(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (not gone, not a zombie)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def stacks(process: subprocess.Popen, err) -> str:
    """The Python stacks of a hung run's threads (faulthandler's dump at SIGABRT), indented."""
    process.send_signal(signal.SIGABRT)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return ""
    err.seek(0)
    text = err.read()
    dump = text[text.find("Fatal Python error"):] if "Fatal Python error" in text else text[-6000:]
    return "\n" + "\n".join("    " + line for line in dump.splitlines())


def one_run(args, sig: signal.Signals, delay: float, exits: list[float]) -> str | None:
    """One signalled run: None when it ended as it must, else what went wrong ("skipped": it ended
    before the signal). The seconds from the signal to rank 0's exit go on ``exits``."""
    with tempfile.TemporaryFile("w+") as err:
        process = start(args, err)
        pgid, under = process.pid, set()
        try:
            try:
                process.wait(timeout=delay)
                return "skipped"
            except subprocess.TimeoutExpired:
                pass
            under = descendants(process.pid)
            if args.target == "group":
                os.killpg(pgid, sig)
            else:
                process.send_signal(sig)
            sent = time.monotonic()
            try:
                code = process.wait(timeout=args.hang)
            except subprocess.TimeoutExpired:
                return f"hang: still running {args.hang:g} s after {sig.name} (sent {delay:.2f} s in)" + stacks(process, err)
            ended = time.monotonic() - sent
            while (group_alive(pgid) or running(under)) and time.monotonic() - sent < args.hang:
                time.sleep(0.05)
            if group_alive(pgid) or running(under):
                return f"left running: a process of the group or under rank 0 outlived it by {args.hang:g} s"
            err.seek(0)
            lines = [line for line in err.read().splitlines() if line.strip() and "weights:" not in line]
            if code == 0 and not lines:   # it ran to its end: the signal came as it exited (its handlers
                return "skipped"          # turn any signal they see into 128 + the signal)
            exits.append(ended)
            if code != 128 + sig:
                return f"wrong exit: code {code}, not {128 + sig}, after {sig.name} at {delay:.2f} s; stderr: {lines[-3:]}"
            if lines != [LINES[sig]]:
                return f"wrong output: after {sig.name} at {delay:.2f} s: {lines[:4]} ({len(lines)} lines)"
            if ended > args.deadline:
                return f"slow: ended as it must, but {ended:.1f} s after {sig.name} (sent {delay:.2f} s in)"
            return None
        finally:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
            for pid in running(under):
                os.kill(pid, signal.SIGKILL)
            process.wait()


def main(argv=None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    sigs = [signal.Signals["SIG" + name.strip().upper()] for name in args.signals.split(",")]
    max_delay = args.max_delay
    if max_delay is None:
        began = time.monotonic()
        with tempfile.TemporaryFile("w+") as err:
            if start(args, err).wait() != 0:
                err.seek(0)
                print(f"the unsignalled run failed: {err.read()[-2000:]}", file=sys.stderr)
                return 1
        max_delay = time.monotonic() - began
    print(f"{args.runs} runs: executor {args.executor}, target {args.target}, signals "
          f"{', '.join(s.name for s in sigs)}, delay 0..{max_delay:.1f} s, deadline {args.deadline:g} s", flush=True)
    counts, exits = Counter(), []
    for i in range(args.runs):
        sig = rng.choice(sigs)
        problem = one_run(args, sig, rng.uniform(0, max_delay), exits)
        kind = "ok" if problem is None else problem.split(":")[0]
        counts[kind] += 1
        counts[sig.name] += kind != "skipped"
        if problem is not None and kind != "skipped":
            print(f"run {i}: {problem}", flush=True)
        else:
            print(f"run {i}: {kind} ({sig.name}" + (f", exit {exits[-1]:.2f} s after it)" if kind == "ok" else ")"),
                  flush=True)
    signalled = args.runs - counts["skipped"]
    print(f"executor {args.executor}, target {args.target}: {signalled} signalled runs "
          f"({', '.join(f'{counts[s.name]} {s.name}' for s in sigs)}), {counts['ok']} ok, {counts['hang']} hangs, "
          f"{counts['slow']} slow (over {args.deadline:g} s), {counts['wrong exit']} wrong exits, "
          f"{counts['wrong output']} wrong outputs, "
          f"{counts['left running']} left running; {counts['skipped']} ended before the signal took effect; "
          f"slowest exit {max(exits, default=0):.2f} s after its signal", flush=True)
    return 0 if counts["ok"] == signalled else 1


if __name__ == "__main__":
    sys.exit(main())
