"""Where this process stands in its group of rank processes: torchrun's variables, read and checked.

A group of rank processes is started by torchrun (or any launcher that sets its variables: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) or by anydev itself
(``executor="mp"``, :mod:`.spawning`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from ..errors import EngineConfigError
from .group_errors import LaunchError

LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: Seconds to reach the store and form the control group (a rank that starts later than this fails).
CONNECT_TIMEOUT_ENV = "ANYDEV_DIST_CONNECT_TIMEOUT"


@dataclass(frozen=True)
class Launch:
    """Where this process stands in its group of rank processes."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    agent_store: bool = False    # torchrun's agent serves the store; every rank is a client
    run_id: str = "anydev"

    @property
    def store_address(self) -> str:
        return f"{self.master_addr}:{self.master_port}"


def launch_from_env(environ: Mapping[str, str] = os.environ) -> Launch | None:
    """This process's :class:`Launch` from torchrun's variables; None when none is set (one process
    runs every rank). A partial or malformed set is a :class:`LaunchError`."""
    present = [name for name in LAUNCH_VARIABLES if environ.get(name)]
    if not present:
        return None
    missing = [name for name in LAUNCH_VARIABLES if not environ.get(name)]
    if missing:
        raise LaunchError(
            f"{', '.join(present)} set but {', '.join(missing)} not: launch every rank with torchrun (it sets "
            f"{', '.join(LAUNCH_VARIABLES)}), set all five, or unset them all to run every rank in this process")
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        try:
            values[name] = int(environ[name])
        except ValueError:
            raise LaunchError(f"{name}={environ[name]!r} is not a whole number; torchrun sets it, or set it yourself") from None
    world, rank, local, port = values["WORLD_SIZE"], values["RANK"], values["LOCAL_RANK"], values["MASTER_PORT"]
    if world < 1 or not 0 <= rank < world or local < 0 or not 0 < port < 65536:
        raise LaunchError(f"RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}, MASTER_PORT={port} do not fit "
                          "together: 0 <= RANK < WORLD_SIZE, LOCAL_RANK >= 0, MASTER_PORT in 1..65535")
    run_id = f"{environ.get('TORCHELASTIC_RUN_ID', 'anydev')}/{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return Launch(rank, world, local, environ["MASTER_ADDR"], port,
                  agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True", run_id=run_id)


def check_world_size(launch: Launch, tp: int, pp: int = 1) -> None:
    """A :class:`LaunchError` unless the group has one process per rank of ``tp`` x ``pp``."""
    needed = tp * pp
    if launch.world_size != needed:
        layout = f"--tp {tp}" + (f" x --pp {pp}" if pp > 1 else "")
        raise LaunchError(
            f"WORLD_SIZE={launch.world_size}, but {layout} runs on {needed} rank process(es): launch {needed} in all "
            f"(torchrun --nnodes N --nproc-per-node M with N x M = {needed}), or set --tp to {launch.world_size}")


def check_local_device(launch: Launch, backend) -> None:
    """An :class:`EngineConfigError` unless ``backend`` has the device this rank uses (LOCAL_RANK)."""
    count = backend.device_count()
    if launch.local_rank >= count:
        raise EngineConfigError(
            f"rank {launch.rank}: LOCAL_RANK={launch.local_rank}, but backend '{backend.name}' has {count} device(s) "
            f"on this machine; start at most {count} rank processes per machine (torchrun --nproc-per-node)")


def seconds_from_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise LaunchError(f"{name}={text!r} must be a positive number of seconds")
    return value
