"""Every flag of ``anydev serve`` and examples/test_infer.py has help, and that help shows the flag's
default: its value when it has one, in words (``(default: ...)``) when leaving it out means something
else; and the two commands take the same engine flags (one definition: core/engine_args.py)."""
from __future__ import annotations

import argparse
import importlib.util
from dataclasses import fields
from pathlib import Path

import pytest

from anydev.cli.commands import build_parser
from anydev.core import EngineConfig
from anydev.core.engine_args import OPTIONS

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "test_infer.py"


def serve_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["serve"]


def infer_parser(monkeypatch) -> argparse.ArgumentParser:
    spec = importlib.util.spec_from_file_location("test_infer_help_module", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = []
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", lambda self, argv=None: built.append(self))
    module.parse_args([])
    return built[0]


@pytest.fixture(params=["serve", "test_infer"])
def parser(request, monkeypatch):
    monkeypatch.delenv("ANYDEV_API_KEY", raising=False)      # a key in the environment is --api-key's default
    return serve_parser() if request.param == "serve" else infer_parser(monkeypatch)


def shown_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return parser._get_formatter()._expand_help(action)


def test_every_flag_has_help_that_shows_its_default(parser):
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert len(actions) > 20
    for action in actions:
        name = action.option_strings[0] if action.option_strings else action.metavar
        assert action.help and action.help is not argparse.SUPPRESS, f"{name} has no help"
        text = shown_help(parser, action)
        if action.nargs == 0:
            continue                                          # an on/off flag: off unless given
        assert "(default" in text, f"{name} shows no default: {text!r}"
        if action.default is not None:
            assert f"(default: {action.default})" in text, f"{name}: default {action.default!r} not shown: {text!r}"


def test_engine_flags_show_the_config_default_they_keep(parser):
    config = {f.name: f.default for f in fields(EngineConfig)}
    for action in parser._actions:
        if action.dest in OPTIONS and action.default is None and action.nargs != 0 and config[action.dest] is not None:
            text = shown_help(parser, action)
            assert f"(default: {config[action.dest]})" in text or "(default: --batch-size)" in text, (action.dest, text)


def test_serve_shows_its_own_max_num_seqs_default():
    action = next(a for a in serve_parser()._actions if a.dest == "max_num_seqs")
    assert shown_help(serve_parser(), action).endswith("(default: 64)")


def test_serve_and_test_infer_take_the_same_engine_flags(monkeypatch):
    engine_flags = {flag for flags, _ in OPTIONS.values() for flag in flags}

    def flags_of(parser):
        return {flag for action in parser._actions for flag in action.option_strings} & engine_flags

    assert flags_of(serve_parser()) == flags_of(infer_parser(monkeypatch)) == engine_flags
    assert {"--seed", "--max-num-seqs"} <= engine_flags
