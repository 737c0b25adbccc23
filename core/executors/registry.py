"""The executors by name (``EngineConfig.executor``), and the choice a command line makes.

Adding an executor is one module implementing :class:`~.base.Executor` and one line in
:data:`EXECUTORS`, or, outside anydev, one :func:`register_executor` call (``docs/executors.md``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import EngineConfigError
from .group_errors import LaunchError
from .launch import check_world_size, launch_from_env

if TYPE_CHECKING:
    from .base import Executor

#: Each executor by name: its class, or for the built-in ones its "module:Class", imported on first use
#: (:func:`executor_class`), so that a command line names and checks executors without loading torch.
EXECUTORS: dict[str, type[Executor] | str] = {
    "threads": "anydev.core.executors.threads:ThreadExecutor",
    "mp": "anydev.core.executors.process_executor:MpExecutor",
    "torchrun": "anydev.core.executors.process_executor:TorchrunExecutor",
}


def executor_class(name: str) -> type[Executor]:
    """The class of the executor registered as ``name`` (a KeyError when none is)."""
    found = EXECUTORS[name]
    if isinstance(found, str):
        module, _, attribute = found.partition(":")
        found = EXECUTORS[name] = getattr(importlib.import_module(module), attribute)
    return found


def register_executor(executor: type[Executor]) -> None:
    """Make ``executor`` (an :class:`Executor` subclass) the one ``EngineConfig.executor`` names by its
    ``name``, in this process (an executor whose ranks are threads of it, then)."""
    from .base import Executor

    if not (isinstance(executor, type) and issubclass(executor, Executor)) or not executor.name:
        raise TypeError(f"register_executor takes an Executor subclass with a name, got {executor!r}")
    known = executor_class(executor.name) if executor.name in EXECUTORS else None
    if known is not None and known is not executor:
        raise ValueError(f"executor {executor.name!r} is already {known.__module__}.{known.__qualname__}")
    EXECUTORS[executor.name] = executor


def validate_executor(config) -> None:
    """Raise :class:`EngineConfigError` unless ``config.executor`` names an executor that can run ``config``."""
    if config.executor not in EXECUTORS:
        raise EngineConfigError(f"executor must be one of {tuple(EXECUTORS)}, got {config.executor!r}")
    executor_class(config.executor).check_config(config)


def make_executor(config, backend) -> Executor:
    """The executor ``config.executor`` names, its checks of the backend and the launch done (no rank
    started yet: :meth:`~.base.Executor.start` does)."""
    from ..models.pipeline import RankLayout

    return executor_class(config.executor)(config, backend, RankLayout(config.tp, config.pp))


def command_executor(requested: str | None, tp: int, pp: int = 1) -> str:
    """The executor of a command-line run (test_infer.py, ``anydev serve``): ``requested``, or
    "torchrun" when torchrun's variables are set, else "threads". On a torchrun rank other than 0
    this runs the rank until rank 0 ends the group and ends the process (it never returns)."""
    launch = launch_from_env()
    executor = requested or ("torchrun" if launch is not None else "threads")
    if executor not in EXECUTORS:
        raise EngineConfigError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "torchrun":
        if launch is None:
            raise LaunchError("--executor torchrun needs the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, "
                              "MASTER_ADDR, MASTER_PORT): start this command with torchrun, or use --executor mp")
        check_world_size(launch, tp, pp)
        if launch.rank != 0:
            from .rank_process import follow_and_exit

            follow_and_exit(launch)
    elif launch is not None:
        raise LaunchError(f"this process was started as rank {launch.rank} of {launch.world_size} (torchrun's variables "
                          f"are set), but --executor {executor} runs every rank from one process: drop --executor "
                          "(torchrun is the default then), or start the command without torchrun")
    return executor
