"""Signals while an engine runs wait for a safe point (anydev.core.interrupts); every command ends in one
line and the signal's exit code (anydev.core.exits)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from anydev.core import interrupts

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "test_infer.py"


def test_a_signal_with_no_engine_live_raises_at_once():
    with interrupts.handled():
        with pytest.raises(interrupts.Interrupted) as raised:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):   # the handler runs at the next bytecode boundary
                pass
    assert raised.value.exit_code == 143 and raised.value.line == "terminated"


def test_a_signal_whose_exception_was_swallowed_stops_the_next_engine_before_its_ranks_start():
    # Some of torch's import-time C calls run the handler and clear the exception it raised; unless
    # the engine checks for the recorded signal, the command starts it and runs to its end, the signal lost.
    from anydev.core import EngineConfig, InferEngine
    from anydev.core.loading.checkpoint import demo_checkpoint

    with interrupts.handled():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        except interrupts.Interrupted:
            pass   # swallowed
        with pytest.raises(interrupts.Interrupted):
            InferEngine(demo_checkpoint(), EngineConfig(device="cpu", tp=2, num_blocks=16, max_model_len=64))
    assert not [t.name for t in threading.enumerate() if t.name.startswith("anydev-rank")]


def test_a_command_body_starts_with_numpy_loaded():
    # torch's C import of numpy (is_numpy_available) clears any exception of that import: a Ctrl-C
    # landing while numpy loads there is dropped and the run goes on (scripts/signal_stress.py
    # provokes it in an mp run). run_command loads numpy first, before a signal can land there.
    program = "import sys\nfrom anydev.core.exits import run_command\nsys.exit(run_command(lambda: 0 if 'numpy' in sys.modules else 3))"
    assert subprocess.run([sys.executable, "-c", program], timeout=120).returncode == 0


def test_a_signal_dropped_in_a_weakref_callback_is_raised_after_it(capfd):
    # Python prints and drops an exception raised in a weakref callback (importlib's module-lock
    # callbacks run during any import): a Ctrl-C landing there must not wait for an engine to start.
    import time
    import weakref

    class Thing:
        pass

    def callback(_):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):   # the handler raises here, inside the callback
            pass

    with interrupts.handled():
        thing = Thing()
        ref = weakref.ref(thing, callback)
        with pytest.raises(interrupts.Interrupted):
            del thing
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:   # the signal sent again is raised here
                pass
    assert ref() is None and "Exception ignored" not in capfd.readouterr().err


def test_a_signal_while_an_engine_runs_waits_for_its_next_wait_and_close_joins_every_rank():
    from anydev.core import EngineConfig, InferEngine, SamplingParams
    from anydev.core.loading.checkpoint import demo_checkpoint

    with interrupts.handled():
        engine = InferEngine(demo_checkpoint(), EngineConfig(device="cpu", tp=2, num_blocks=16, max_model_len=64))
        try:
            os.kill(os.getpid(), signal.SIGINT)   # recorded, not raised: rank threads are running
            assert interrupts.received() == signal.SIGINT
            with pytest.raises(interrupts.Interrupted):
                engine.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=20))
        finally:
            engine.close()   # the signal was raised once already: close ends quietly
    assert not [t.name for t in threading.enumerate() if t.name.startswith("anydev-rank")]


def test_a_signal_recorded_outside_any_wait_is_raised_when_the_engine_closes():
    from anydev.core import EngineConfig, InferEngine
    from anydev.core.loading.checkpoint import demo_checkpoint

    with interrupts.handled():
        engine = InferEngine(demo_checkpoint(), EngineConfig(device="cpu", tp=2, num_blocks=16, max_model_len=64))
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(interrupts.Interrupted):
            engine.close()
    assert engine._closed and not engine.workers


def test_a_second_signal_ends_the_process_at_once():
    code = ("import os, signal, time\n"
            "from anydev.core import interrupts\n"
            "with interrupts.handled():\n"
            "    interrupts.engine_live(object())\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(30)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (130, "interrupted\n")


def _interrupted_run(executor: str, sig: signal.Signals, whole_group: bool) -> tuple[int, str, str]:
    """test_infer.py at TP=2 signalled once its generation runs: (exit code, stdout, stderr)."""
    process = subprocess.Popen([sys.executable, "-u", str(SCRIPT), "--tp", "2", "--executor", executor,
                                "--max-new-tokens", "900", "--no-chat-template", "--prompt", "hi"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in process.stdout:
            if line.startswith("init timeline"):
                break
        if whole_group:   # as a terminal's Ctrl-C: every process of the group
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
        out, err = process.communicate(timeout=120)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert "--- output" not in out, "the generation ended before the signal; it proves nothing"
    return process.returncode, out, "\n".join(line for line in err.splitlines() if line.strip() and "weights:" not in line)


def test_sigterm_during_generation_is_one_line_and_exit_143():
    assert _interrupted_run("threads", signal.SIGTERM, whole_group=False)[::2] == (143, "terminated")


def test_ctrl_c_to_every_rank_process_is_one_line_from_rank_0_and_exit_130():
    code, _, err = _interrupted_run("mp", signal.SIGINT, whole_group=True)
    assert (code, err) == (130, "interrupted")


def test_ctrl_c_during_generation_is_one_line_and_exit_130():
    # Long enough a generation (TP=2, hundreds of tokens) that SIGINT lands inside it.
    process = subprocess.Popen([sys.executable, "-u", str(SCRIPT), "--tp", "2", "--max-new-tokens", "900",
                                "--no-chat-template", "--prompt", "hi"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stdout:
            if line.startswith("init timeline"):
                break
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert "--- output" not in out, "the generation ended before the signal; it proves nothing"
    assert process.returncode == 130, err
    assert "Traceback" not in err
    messages = [line for line in err.splitlines() if line.strip() and "weights:" not in line]   # no progress bars
    assert messages == ["interrupted"]


def test_ctrl_c_in_an_anydev_subcommand_is_one_line_and_exit_130(monkeypatch, capsys):
    from anydev.cli import commands as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.SUBCOMMANDS, "list-backends", cli.Subcommand(
        "list-backends", "", cli.SUBCOMMANDS["list-backends"].add_arguments, interrupted))
    assert cli.main(["list-backends"]) == 130
    assert capsys.readouterr().err.splitlines() == ["interrupted"]


@pytest.mark.parametrize("command", [["-m", "anydev", "list-backends", "--json"],
                                     ["-m", "anydev.conformance.mutants", "--list"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(command):
    read, write = os.pipe()
    process = subprocess.Popen([sys.executable, *command], stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    os.close(read)   # before the command writes: its first write meets a closed pipe
    _, err = process.communicate(timeout=300)
    assert (process.returncode, err) == (141, "")


@pytest.mark.parametrize("rank, lines", [("0", ["error: WORLD_SIZE does not fit"]), ("1", [])])
def test_an_error_every_torchrun_rank_meets_is_said_by_rank_0_alone(monkeypatch, capsys, rank, lines):
    from anydev.core.exits import run_command
    from anydev.plugin_api.errors import AnydevError

    def bad_launch():
        raise AnydevError("WORLD_SIZE does not fit")

    monkeypatch.setenv("RANK", rank)
    assert run_command(bad_launch) == 2
    assert capsys.readouterr().err.splitlines() == lines


def test_an_error_a_signal_caused_on_its_way_out_is_reported_as_the_signal(capsys):
    # e.g. Ctrl-C inside an import, swallowed there, leaves a half-imported module that fails later
    from anydev.core.exits import run_command

    def interrupted_import():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            pass
        raise AttributeError("module 'numpy' has no attribute 'matrix'")

    assert run_command(interrupted_import) == 130
    assert capsys.readouterr().err.splitlines() == ["interrupted"]
