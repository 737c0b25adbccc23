"""``tool_choice`` required or a named function, enforced by a grammar (as vLLM does), with llguidance.

Named: the answer is constrained to a JSON object that follows the function's ``parameters`` schema,
and returned as one call of that function whose ``arguments`` are the answer's text; its finish
reason stays "stop" (what OpenAI and vLLM answer for a forced function). Required: the answer is a
JSON array (at least one item; exactly one with ``parallel_tool_calls`` false) of
``{"name": ..., "parameters": ...}`` objects, each item's parameters following its own tool's schema;
returned as those calls with finish reason "tool_calls". Streamed, a call is one ``tool_calls`` delta
once its text is complete, as the parsers' calls stream. Without llguidance the choice is asked of
the model through its prompt only (:class:`~.answer.ToolUse`).
"""
from __future__ import annotations

import copy
import json

from anydev.core.errors import EngineConfigError
from anydev.core.sched.structured import GrammarLibraryMissing, StructuredOutput, library

from ..protocol import APIError
from .answer import ToolUse, call_object
from .base import ParsedCall, ToolParser, call_from_json

#: The schema of a function that declares no parameters: an object with none (vLLM's choice too).
NO_PARAMETERS = {"type": "object", "properties": {}}


def grammar_enforced() -> bool:
    """Whether ``tool_choice`` required and named are enforced here (llguidance is installed)."""
    try:
        library()
    except GrammarLibraryMissing:
        return False
    return True


def tool_use(parser: ToolParser, body) -> "ToolUse | ForcedToolUse":
    """How a chat request with tools is answered: forced by a grammar where its ``tool_choice`` is
    required or named and llguidance is installed, else read by the server's ``parser``."""
    parallel = body.parallel_tool_calls is not False
    if body.required_tool is None or not grammar_enforced():
        return ToolUse(parser, body.required_tool, parallel)
    return ForcedToolUse(body.tools, body.required_tool, parallel)


def named_schema(tool) -> dict:
    return tool.function.parameters or NO_PARAMETERS


def required_schema(tools, parallel: bool) -> dict:
    """vLLM's schema for ``required``: an array of calls, each one tool's name with its parameters.
    Each tool's ``$defs`` move to the root (its ``#/$defs/...`` references point there)."""
    items, defs = [], {}
    for tool in tools:
        parameters = copy.deepcopy(named_schema(tool))
        for name, schema in parameters.pop("$defs", {}).items():
            if defs.setdefault(name, schema) != schema:
                raise APIError(400, f"two tools define '$defs/{name}' differently; tool_choice required joins "
                                    f"their schemas into one: rename one of them", param="tools")
        items.append({"type": "object", "properties": {"name": {"type": "string", "enum": [tool.function.name]},
                                                       "parameters": parameters},
                      "required": ["name", "parameters"], "additionalProperties": False})
    schema = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
    if not parallel:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


class ForcedToolUse:
    """One request's forced choice: ``required`` is the function's name, or "" for any of ``tools``;
    ``grammar`` is the constraint its sampling carries (a 400 naming ``tools`` when llguidance
    cannot build it)."""

    def __init__(self, tools, required: str, parallel: bool = True):
        self.required = required
        if required:
            schema = named_schema(next(t for t in tools if t.function.name == required))
        else:
            schema = required_schema(tools, parallel)
        # Compact JSON: arguments are read by programs, and whitespace is where a weak model loops.
        self.grammar = StructuredOutput("json", json.dumps(schema), compact=True)
        try:
            self.grammar.validate()
        except EngineConfigError as exc:
            raise APIError(400, f"tool_choice {required or 'required'}: the tools' parameters schema cannot be "
                                f"enforced: {exc}", param="tools") from None

    def calls(self, text: str) -> list[ParsedCall]:
        stream = self.stream()
        stream.feed(text)
        stream.finish()
        return stream.calls

    def message(self, text: str) -> dict:
        calls = self.calls(text)
        self.check(calls)
        return {"role": "assistant", "content": None, "tool_calls": [call_object(c) for c in calls]}

    def check(self, calls: list[ParsedCall]) -> None:
        """Only an answer cut before its first call was complete (max_tokens, a stop string) has none."""
        if not calls:
            raise APIError(500, "tool_choice required: the answer ended before its first call was complete "
                                "(max_tokens or a stop string cut it); allow more tokens", type="server_error",
                           code="tool_call_not_parsed")

    def finish_reason(self, reason: str | None, called: bool) -> str | None:
        return "tool_calls" if called and reason == "stop" and not self.required else reason

    def stream(self) -> "ForcedDeltas":
        return ForcedDeltas(self.required)


class ForcedDeltas:
    """A forced answer's calls as its text arrives: a named call once the whole text is in (at the
    end, its arguments as written, cut short if the answer was); each of required's array items once
    its object closes. ``feed`` and ``finish`` return the ``tool_calls`` deltas."""

    def __init__(self, required: str):
        self.required = required
        self.calls: list[ParsedCall] = []
        self._text = ""
        self._depth, self._in_string, self._escaped, self._item_start = 0, False, False, None

    def feed(self, text: str) -> list[dict]:
        self._text += text
        if self.required:
            return []
        found = []
        for i in range(len(self._text) - len(text), len(self._text)):
            item = self._scan(self._text[i], i)
            if item is not None:
                found.append(item)
        return self._deltas(found)

    def _scan(self, ch: str, i: int) -> ParsedCall | None:
        """One character of the array: the call whose object it closes, if it does."""
        if self._in_string:
            self._in_string = ch != '"' or self._escaped
            self._escaped = ch == "\\" and not self._escaped
            return None
        if ch == '"':
            self._in_string = True
        elif ch in "[{":
            self._depth += 1
            if self._depth == 2:
                self._item_start = i
        elif ch in "]}":
            self._depth -= 1
            if self._depth == 1 and ch == "}":
                return call_from_json(json.loads(self._text[self._item_start:i + 1]))
        return None

    def finish(self) -> list[dict]:
        if not self.required:
            return []
        return self._deltas([ParsedCall(self.required, self._text.strip())])

    def _deltas(self, calls: list[ParsedCall]) -> list[dict]:
        out = []
        for call in calls:
            out.append({"tool_calls": [call_object(call, len(self.calls))]})
            self.calls.append(call)
        return out
