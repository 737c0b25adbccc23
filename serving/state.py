"""What every route reads: the engine core's client, the tokenizer, the metrics, the model name, the limits,
the key, the tool-call parser."""
from __future__ import annotations

from dataclasses import dataclass

from anydev.core.loading.tokenizer import Tokenizer

from .async_engine import AsyncEngine
from .limits import ServerLimits
from .metrics import ServerMetrics
from .tools import ToolParser


@dataclass
class ServerState:
    engine: AsyncEngine
    tokenizer: Tokenizer | None
    metrics: ServerMetrics
    model_name: str
    limits: ServerLimits
    api_key: str | None
    tool_parser: ToolParser | None = None     # --tool-call-parser: how answers' tool calls are read
