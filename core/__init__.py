"""The inference engine: Llama-family models over N tensor-parallel ranks on any anydev backend."""
from .engine import EngineConfig, EngineCounters, GenerationOutput, GenerationStats, InferEngine
from .errors import EngineClosedError, EngineConfigError, EngineInitError, RequestFailedError
from .sched.sampling import SamplingParams
from .timeline import PHASES, PhaseRecord, format_timeline

__all__ = [
    "EngineClosedError", "EngineConfig", "EngineConfigError", "EngineCounters", "EngineInitError", "GenerationOutput",
    "GenerationStats", "InferEngine", "PHASES", "PhaseRecord", "RequestFailedError", "SamplingParams", "format_timeline",
]
