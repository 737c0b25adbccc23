"""Ctrl-C during generation: the command stops promptly with exit code 130 and one line, no traceback."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "test_infer.py"


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
