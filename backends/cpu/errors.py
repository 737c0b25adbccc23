"""Error codes of the cpu runtime, named like CUDA's so that messages read alike on every backend."""
from __future__ import annotations

from ...plugin_api.errors import RuntimeCallError

INVALID_VALUE = (1, "cpuErrorInvalidValue")
MEMORY_ALLOCATION = (2, "cpuErrorMemoryAllocation")
INVALID_HANDLE = (400, "cpuErrorInvalidResourceHandle")
NOT_READY = (600, "cpuErrorNotReady")
LAUNCH_FAILURE = (719, "cpuErrorLaunchFailure")


def call_error(call: str, code: tuple[int, str], message: str, error_type=RuntimeCallError) -> RuntimeCallError:
    """A ``RuntimeCallError`` (or subclass) of the cpu backend for ``call``."""
    number, name = code
    return error_type("cpu", call, number, name, message)
