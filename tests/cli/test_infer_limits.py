"""examples/test_infer.py and the engine check the context before any weights load: a prompt that
leaves no room, a block larger than the context, undecodable prompt bytes are one error line (exit
2); --max-new-tokens beyond the context is capped, said so, and both sides of the checks use the cap."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from anydev.core import EngineConfig, EngineConfigError, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.loading.tokenizer import InvalidTextError

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "test_infer.py"


def load_cli(monkeypatch):
    """The script as a module whose InferEngine must never be built (nothing may load)."""
    spec = importlib.util.spec_from_file_location("test_infer_limits_module", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was built (weights loaded) before the check")

    monkeypatch.setattr("anydev.core.InferEngine", no_engine)   # the script imports it when it runs
    return module


@pytest.mark.parametrize("args, message", [
    (["--max-cache-len", "16", "--block-size", "4", "--prompt", "the " * 20],
     "the prompt has 27 tokens, but the context is 16 tokens"),
    (["--block-size", "2048"], "block_size 2048 is larger than the context of 1024 tokens"),
    (["--max-cache-len", "32", "--block-size", "64"], "block_size 64 is larger than the context of 32 tokens"),
])
def test_context_problems_are_one_line_before_any_weights_load(args, message, monkeypatch, capsys):
    assert load_cli(monkeypatch).main(args) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], errors


def test_a_block_larger_than_the_context_is_a_config_error():
    with pytest.raises(EngineConfigError, match="block_size 64 is larger than the context of 32 tokens"):
        InferEngine(demo_checkpoint(), EngineConfig(max_model_len=32, block_size=64))


def test_max_new_tokens_beyond_the_context_is_capped_and_both_checks_use_the_cap():
    pytest.importorskip("transformers")
    result = subprocess.run([sys.executable, str(SCRIPT), "--tp", "2", "--max-cache-len", "48", "--block-size", "8",
                             "--max-new-tokens", "100000"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "max new tokens: 24, not 100000 (--max-new-tokens): the context of 48 tokens leaves 24" in result.stdout
    assert "tokens match the cpu reference: yes" in result.stdout
    assert "tokens match HF transformers: yes" in result.stdout


def test_a_prompt_of_undecodable_bytes_is_one_error_line():
    result = subprocess.run([sys.executable, str(SCRIPT), "--prompt", b"caf\xe9 \xff"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == ["error: the text is not valid UTF-8 (it holds '\\udce9', an undecodable "
                                          "byte or a lone surrogate); give it as UTF-8"]


def test_the_tokenizer_refuses_lone_surrogates_with_a_typed_error():
    tokenizer = demo_checkpoint().tokenizer
    with pytest.raises(InvalidTextError, match="udcff"):
        tokenizer.encode("hi\udcff")
    assert tokenizer.encode("héllo")   # valid non-ASCII text still encodes
