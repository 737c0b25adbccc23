"""A chat answer's tool calls in the OpenAI shape: the message's ``tool_calls``, or a stream's deltas.

Here ``tool_choice`` required or named is asked of the model through its prompt only (the output is
not constrained): where llguidance is installed a grammar enforces them instead (:mod:`.forced`).
An answer without the call asked for is an error (500, ``tool_call_not_parsed``), never a silent
text answer.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..protocol import APIError
from .base import ParsedCall, StreamEvent, ToolParser


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def call_object(call: ParsedCall, index: int | None = None) -> dict:
    """A call as the answer's ``tool_calls`` entry (with ``index``: as a stream's delta entry)."""
    entry = {"id": call_id(), "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    return entry if index is None else {"index": index, **entry}


@dataclass
class ToolUse:
    """How one request's answer is read: the server's ``parser``; ``required``: the function the
    answer must call ("" any, None: text may answer); ``parallel``: more than one call is kept."""

    parser: ToolParser
    required: str | None
    parallel: bool = True
    grammar = None          # the output is not constrained

    def finish_reason(self, reason: str | None, called: bool) -> str | None:
        """The answer's finish reason: "tool_calls" where it ended on its own after a call."""
        return "tool_calls" if called and reason == "stop" else reason

    def message(self, text: str) -> dict:
        """The assistant message of a whole answer: its content (None when only calls) and its tool_calls."""
        parsed = self.parser.parse(text)
        calls = self._kept(parsed.calls)
        self.check(calls)
        if not calls:
            return {"role": "assistant", "content": parsed.content}
        return {"role": "assistant", "content": parsed.content, "tool_calls": [call_object(c) for c in calls]}

    def _kept(self, calls: list[ParsedCall]) -> list[ParsedCall]:
        return calls if self.parallel else calls[:1]

    def check(self, calls: list[ParsedCall]) -> None:
        """The error of an answer that lacks the call ``tool_choice`` asked for."""
        if self.required is None:
            return
        if not calls or (self.required and any(c.name != self.required for c in calls)):
            wanted = f"a call of '{self.required}'" if self.required else "a tool call"
            got = ", ".join(c.name for c in calls) or "text only"
            raise APIError(500, f"tool_choice asks for {wanted}, but the model's answer holds {got} as the "
                                f"'{self.parser.name}' parser reads it; this server asks for the call through the "
                                f"prompt and does not constrain the output", type="server_error",
                           code="tool_call_not_parsed")

    def stream(self) -> "ToolDeltas":
        return ToolDeltas(self)


class ToolDeltas:
    """A streamed answer's deltas: text fed as it settles becomes content deltas and, once a call's
    text is complete, one ``tool_calls`` delta per call (id, name and the whole arguments)."""

    def __init__(self, use: ToolUse):
        self.use = use
        self._stream = use.parser.stream()
        self.calls: list[ParsedCall] = []

    def feed(self, text: str) -> list[dict]:
        return self._deltas(self._stream.feed(text) if text else [])

    def finish(self) -> list[dict]:
        """The last deltas; raises the :meth:`ToolUse.check` error after them is the caller's to send."""
        return self._deltas(self._stream.finish())

    def _deltas(self, events: list[StreamEvent]) -> list[dict]:
        out = []
        for event in events:
            if event.call is None:
                if event.content:
                    out.append({"content": event.content})
            elif self.use.parallel or not self.calls:
                out.append({"tool_calls": [call_object(event.call, len(self.calls))]})
                self.calls.append(event.call)
        return out
