"""Tool calls in a model's output: a parser per template family, chosen by ``--tool-call-parser``."""
from .answer import ToolDeltas, ToolUse
from .base import ParsedCall, ParsedOutput, ToolParser, ToolStream
from .forced import ForcedToolUse, grammar_enforced, tool_use
from .hermes import HermesParser
from .llama3_json import Llama3JsonParser

#: The parsers ``anydev serve --tool-call-parser`` names (the names vLLM gives the same formats).
TOOL_PARSERS: dict[str, type[ToolParser]] = {"hermes": HermesParser, "llama3_json": Llama3JsonParser}

__all__ = ["TOOL_PARSERS", "HermesParser", "Llama3JsonParser", "ParsedCall", "ParsedOutput", "ToolParser",
           "ToolStream", "ToolDeltas", "ToolUse", "ForcedToolUse", "grammar_enforced", "tool_use"]
