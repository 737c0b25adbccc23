"""What a tool-call parser gives: the answer's text split into content and calls, whole or as it streams.

A parser is a :class:`ToolStream` fed the answer's text piece by piece; the whole answer's parse is
the same stream fed the whole text at once, so a streamed answer and a whole one always read the
same. A call whose text does not read as a call (bad JSON, no name) stays in the content, as text.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass
class ParsedCall:
    """One function call: its name and its arguments as JSON text (an object)."""

    name: str
    arguments: str


@dataclass
class ParsedOutput:
    """The answer read by a parser: its content (None when it is only calls) and its calls, in order."""

    content: str | None
    calls: list[ParsedCall] = field(default_factory=list)


@dataclass
class StreamEvent:
    """A piece of what a stream found: content text, or (``call`` set) the next complete call."""

    content: str = ""
    call: ParsedCall | None = None


class ToolStream(ABC):
    """One answer's text, fed by :meth:`feed` as it arrives and ended by :meth:`finish`; both return
    what became settled (content pieces and complete calls, in the order of the text). Content that
    ends in whitespace holds the whitespace until more content follows: whitespace before a call is
    not content."""

    def __init__(self):
        self._space = ""          # trailing whitespace of the content, not handed out yet
        self.num_calls = 0

    @abstractmethod
    def feed(self, text: str) -> list[StreamEvent]:
        ...

    @abstractmethod
    def finish(self) -> list[StreamEvent]:
        ...

    def _content(self, text: str) -> list[StreamEvent]:
        """``text`` as content, its trailing whitespace held."""
        if not text:
            return []
        stripped = text.rstrip()
        if not stripped:
            self._space += text
            return []
        out, self._space = self._space + stripped, text[len(stripped):]
        return [StreamEvent(content=out)]

    def _call(self, call: ParsedCall) -> list[StreamEvent]:
        self._space = ""
        self.num_calls += 1
        return [StreamEvent(call=call)]

    def _end(self) -> list[StreamEvent]:
        """At the end: the held whitespace is content only when no call was found."""
        space, self._space = self._space, ""
        return [StreamEvent(content=space)] if space and not self.num_calls else []


class ToolParser(ABC):
    """A format of tool calls (a model family's): :meth:`stream` reads one answer."""

    name: str = ""

    @abstractmethod
    def stream(self) -> ToolStream:
        ...

    def parse(self, text: str) -> ParsedOutput:
        """The whole answer's content and calls (as the stream reads it)."""
        stream = self.stream()
        events = stream.feed(text) + stream.finish()
        content = "".join(e.content for e in events)
        calls = [e.call for e in events if e.call is not None]
        return ParsedOutput(content if content.strip() or not calls else None, calls)


def call_from_json(value) -> ParsedCall | None:
    """A decoded JSON value as a call: an object with a string ``name`` and an object of arguments
    (``arguments``, or Llama 3's ``parameters``; a JSON text holding an object is read too), else None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def held_prefix(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` could begin ``marker`` (so must wait for more text)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
