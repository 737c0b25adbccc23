"""``anydev serve``'s command line: the model as vLLM's positional form or as --model, the same;
two different models, one ``error:`` line; a hub id, one line saying how to download it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from anydev.cli.commands import build_parser
from anydev.core.errors import EngineConfigError
from anydev.serving.server import model_argument


def parsed(*argv: str):
    return build_parser().parse_args(["serve", *argv])


@pytest.mark.parametrize("argv", [("/models/Llama",), ("/models/Llama", "--tp", "2"), ("--tp", "2", "/models/Llama"),
                                  ("/models/Llama", "--model", "/models/Llama")])
def test_the_positional_model_is_the_model_flag(argv):
    args = parsed(*argv)
    rest = [a for a in argv if a not in ("/models/Llama", "--model")]
    flagged = parsed("--model", "/models/Llama", *rest)
    assert model_argument(args) == model_argument(flagged) == "/models/Llama"
    assert {k: v for k, v in vars(args).items() if k != "model_tag"} == \
        {k: v for k, v in vars(flagged).items() if k != "model_tag"} | {"model": args.model}


def test_no_model_is_the_demo_model():
    assert model_argument(parsed()) is None


def test_two_different_models_are_refused():
    with pytest.raises(EngineConfigError, match="two models given: '/a' and --model '/b'"):
        model_argument(parsed("/a", "--model", "/b"))


def run_serve(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "anydev", "serve", "--device", "cpu", "--port", "0", *argv],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_two_models_on_the_command_line_are_one_error_line():
    result = run_serve("/a", "--model", "/b")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: two models given: '/a' and --model '/b'; give one (anydev serve MODEL or --model MODEL)"]


@pytest.mark.parametrize("argv", [("--model", "meta-llama/Llama-3.2-1B"), ("meta-llama/Llama-3.2-1B",)],
                         ids=["--model", "positional"])
def test_a_hub_id_is_one_line_saying_only_local_paths_are_read_and_how_to_download(tmp_path, argv):
    result = run_serve(*argv, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "reads only local files" in lines[0]
    assert "huggingface-cli download meta-llama/Llama-3.2-1B --local-dir DIR" in lines[0]
