"""The inference engine: Llama-family models over N tensor-parallel ranks on any anydev backend."""
from .engine import EngineConfig, GenerationOutput, GenerationStats, InferEngine
from .errors import EngineClosedError, EngineConfigError, EngineInitError, RequestFailedError
from .sched.sampling import SamplingParams
from .timeline import PHASES, PhaseRecord, format_timeline

__all__ = [
    "EngineClosedError", "EngineConfig", "EngineConfigError", "EngineInitError", "GenerationOutput", "GenerationStats",
    "InferEngine", "PHASES", "PhaseRecord", "RequestFailedError", "SamplingParams", "format_timeline",
]
