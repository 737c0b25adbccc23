"""One source for the engine's command-line options: `anydev serve` and examples/test_infer.py take
the same flags and turn them into the same EngineConfig; InfiniLM's --max-cache-len is an alias."""
from __future__ import annotations

import argparse
import importlib.util
from dataclasses import fields
from pathlib import Path

import pytest

from anydev.cli.commands import build_parser
from anydev.core import EngineConfig
from anydev.core.engine_args import FLAGS, OPTIONS, add_engine_arguments, engine_argv, engine_config_from_args
from anydev.core.executors.registry import register_executor
from anydev.core.executors.threads import ThreadExecutor

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "test_infer.py"
FLAGS_GIVEN = ["--device", "cpu", "--tp", "2", "--pp", "1", "--dtype", "float32", "--max-model-len", "96",
               "--block-size", "8", "--num-blocks", "40", "--enforce-eager", "--no-prefix-caching",
               "--kernels", "reference", "--quantization", "int8", "--executor", "threads"]
WANTED = dict(device="cpu", tp=2, pp=1, dtype="float32", max_model_len=96, block_size=8, num_blocks=40,
              use_graphs=False, enable_prefix_caching=False, kernels="reference", quantization="int8",
              executor="threads")


def infer_parse_args():
    spec = importlib.util.spec_from_file_location("test_infer_args_module", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_args


def test_serve_and_test_infer_give_the_same_config_for_the_same_flags():
    serve = engine_config_from_args(build_parser().parse_args(["serve", *FLAGS_GIVEN]))
    infer = engine_config_from_args(infer_parse_args()(FLAGS_GIVEN))
    for name, value in WANTED.items():
        assert getattr(serve, name) == value and getattr(infer, name) == value, name
    assert serve.max_num_seqs == 64 and infer.max_num_seqs == EngineConfig().max_num_seqs   # serve's own default


def test_max_cache_len_is_an_alias_of_max_model_len():
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    assert engine_config_from_args(parser.parse_args(["--max-cache-len", "77"])).max_model_len == 77
    assert engine_config_from_args(parser.parse_args(["--max-model-len", "77"])).max_model_len == 77


def test_flags_left_out_keep_the_config_defaults_and_every_option_is_a_field():
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    assert engine_config_from_args(parser.parse_args([])) == EngineConfig()
    assert set(OPTIONS) <= {f.name for f in fields(EngineConfig)}
    assert FLAGS["max_model_len"] == "--max-model-len" and FLAGS["use_graphs"] == "--enforce-eager"


def test_engine_argv_gives_the_same_settings_again():
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    args = parser.parse_args(FLAGS_GIVEN)
    again = parser.parse_args(engine_argv(args))
    assert engine_config_from_args(again) == engine_config_from_args(args)
    assert "--enforce-eager" in engine_argv(args) and "--no-chunked-prefill" not in engine_argv(args)


def test_executor_accepts_one_registered_after_the_parser_is_built_and_names_them_when_refusing(capsys):
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)

    class LaterExecutor(ThreadExecutor):
        name = "later"

    register_executor(LaterExecutor)   # gone after the test (tests/conftest.py)
    assert engine_config_from_args(parser.parse_args(["--executor", "later"])).executor == "later"
    with pytest.raises(SystemExit):
        parser.parse_args(["--executor", "ray"])
    assert "argument --executor: no executor named 'ray'; registered: threads, mp, torchrun, later" in capsys.readouterr().err
