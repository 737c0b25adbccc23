"""The ``anydev`` command (also ``python -m anydev``): its table of subcommands and its entry point.

Each subcommand is a :class:`Subcommand` in :data:`SUBCOMMANDS`: a name, a one-line help, a function
that adds its arguments and a function that runs it and returns the exit code. To add one, write those
two functions (in a module of its own) and call :func:`register`. The functions of ``new-backend``,
``serve`` and ``bench`` import their modules on first use, so that ``anydev list-backends`` loads neither.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from anydev.cli import list_backends
from anydev.cli.help_format import ShownDefaultsFormatter


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


SUBCOMMANDS: dict[str, Subcommand] = {}


def register(subcommand: Subcommand) -> None:
    SUBCOMMANDS[subcommand.name] = subcommand


def _add_new_backend_arguments(parser: argparse.ArgumentParser) -> None:
    from anydev.cli import scaffold

    scaffold.add_arguments(parser)


def _new_backend(args: argparse.Namespace) -> int:
    from anydev.cli import scaffold

    return scaffold.run(args)


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from anydev.serving import server

    server.add_arguments(parser)


def _serve(args: argparse.Namespace) -> int:
    from anydev.serving import server

    return server.run(args)


def _add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    from anydev.cli import bench

    bench.add_arguments(parser)


def _bench(args: argparse.Namespace) -> int:
    from anydev.cli import bench

    return bench.run(args)


register(Subcommand("list-backends", "show every backend, whether it is available here, and why not",
                    list_backends.add_arguments, list_backends.run))
register(Subcommand("new-backend", "write the skeleton of an installable backend package",
                    _add_new_backend_arguments, _new_backend))
register(Subcommand("serve", "serve a model over the OpenAI HTTP API (FastAPI + uvicorn)",
                    _add_serve_arguments, _serve))
register(Subcommand("bench", "benchmark the engine or a running server: latency, throughput, serve (vLLM's)",
                    _add_bench_arguments, _bench))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anydev", description="anydev: a hardware-portable backend layer for LLM inference",
                                     formatter_class=ShownDefaultsFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for subcommand in SUBCOMMANDS.values():
        subcommand.add_arguments(commands.add_parser(subcommand.name, help=subcommand.help, description=subcommand.help,
                                                     formatter_class=ShownDefaultsFormatter))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from anydev.core.exits import run_command   # one line and the exit code for errors, signals, broken pipes

    return run_command(SUBCOMMANDS[args.command].run, args)


def entry() -> None:
    """The ``anydev`` command (console script and ``python -m anydev``)."""
    from anydev.core.exits import exit_process

    exit_process(main())
