"""The inference engine: Llama-family models over N tensor-parallel ranks on any anydev backend.

The names below are imported on first use, so that ``anydev.core.interrupts`` and ``anydev.core.exits``
(which a command line imports before anything else, a Ctrl-C while torch loads included) load no torch.
"""
from importlib import import_module

#: Each public name and the module that defines it.
_EXPORTS = {
    "EngineConfig": ".engine", "EngineCounters": ".engine", "GenerationOutput": ".engine", "GenerationStats": ".engine", "InferEngine": ".engine",
    "EngineClosedError": ".errors", "EngineConfigError": ".errors", "EngineInitError": ".errors",
    "RequestFailedError": ".errors", "SamplingParams": ".sched.sampling_params", "StructuredOutput": ".sched.structured",
    "PHASES": ".timeline", "PhaseRecord": ".timeline", "format_timeline": ".timeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
