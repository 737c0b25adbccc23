"""The cpu backend's settings, read from environment variables."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

from ...plugin_api.errors import BackendUnavailableError

DEVICES_ENV = "ANYDEV_CPU_DEVICES"
DEVICE_MEMORY_ENV = "ANYDEV_CPU_DEVICE_MEMORY"
COLLECTIVE_TIMEOUT_ENV = "ANYDEV_CPU_COLLECTIVE_TIMEOUT"
#: "1": offer the shared Triton kernels, run by Triton's interpreter (needs TRITON_INTERPRET=1 set
#: before anything imports triton); how CI checks them without a GPU. Slow: for tests only.
TRITON_ENV = "ANYDEV_CPU_TRITON"

DEFAULT_DEVICES = 8
DEFAULT_DEVICE_MEMORY = 4 * 2**30
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SIZE_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_size(text: str) -> int:
    """Bytes from ``"4294967296"``, ``"4GiB"``, ``"512 MiB"`` or ``"1.5GB"``; ValueError otherwise."""
    match = _SIZE_PATTERN.fullmatch(text)
    unit = match and _SIZE_UNITS.get(match.group(2).lower())
    if not match or unit is None:
        raise ValueError(f"{text!r} is not a size; write bytes or a number with a unit such as 4GiB or 512MiB")
    return int(float(match.group(1)) * unit)


@dataclass(frozen=True)
class CpuConfig:
    """How many virtual devices, how large each one is, how long collectives wait for peers."""

    num_devices: int = DEFAULT_DEVICES
    device_memory: int = DEFAULT_DEVICE_MEMORY
    collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S
    triton_kernels: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "CpuConfig":
        """Read the settings; a malformed value raises ``BackendUnavailableError`` naming the variable."""
        return cls(
            num_devices=_read(environ, DEVICES_ENV, DEFAULT_DEVICES, _parse_count, "a whole number of devices (at least 1) such as 8"),
            device_memory=_read(environ, DEVICE_MEMORY_ENV, DEFAULT_DEVICE_MEMORY, parse_size, "a size such as 4GiB"),
            collective_timeout_s=_read(
                environ, COLLECTIVE_TIMEOUT_ENV, DEFAULT_COLLECTIVE_TIMEOUT_S, _parse_seconds, "a positive number of seconds such as 60"
            ),
            triton_kernels=_read_triton(environ),
        )


def _read(environ, variable, default, parse, expected):
    text = environ.get(variable)
    if text is None or text.strip() == "":
        return default
    try:
        return parse(text)
    except ValueError as exc:
        raise BackendUnavailableError(
            "cpu", f"{variable}={text!r} is invalid ({exc}); set it to {expected} or unset it"
        ) from None


def _parse_count(text: str) -> int:
    count = int(text)
    if count < 1:
        raise ValueError("the cpu backend needs at least one device")
    return count


def _parse_seconds(text: str) -> float:
    seconds = float(text)
    if not seconds > 0:
        raise ValueError("the timeout must be positive")
    return seconds


def _read_triton(environ) -> bool:
    """``ANYDEV_CPU_TRITON``: off unless "1"; on needs Triton and its interpreter."""
    text = (environ.get(TRITON_ENV) or "0").strip()
    if text not in ("0", "1"):
        raise BackendUnavailableError("cpu", f"{TRITON_ENV}={text!r} is invalid; set it to 1 or 0, or unset it")
    if text == "0":
        return False
    if environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailableError(
            "cpu", f"{TRITON_ENV}=1 runs the Triton kernels through Triton's interpreter, which needs "
            f"TRITON_INTERPRET=1 in the environment before Python starts; set both, or unset {TRITON_ENV}")
    from ..triton_kernels import triton_importable

    if not triton_importable():
        raise BackendUnavailableError("cpu", f"{TRITON_ENV}=1 needs Triton: pip install triton, or unset {TRITON_ENV}")
    return True
