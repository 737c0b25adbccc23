"""Llama 3.x JSON tool calls: the answer is ``{"name": ..., "parameters": {...}}`` (or ``arguments``),
several separated by ``;``, optionally after ``<|python_tag|>``. An answer that does not begin so
is content only. Parser name: ``llama3_json``.
"""
from __future__ import annotations

import json

from .base import StreamEvent, ToolParser, ToolStream, call_from_json

PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


class _Llama3Stream(ToolStream):
    def __init__(self):
        super().__init__()
        self._buffer = ""
        self._mode = None        # None: undecided; "text": content only; "json": calls
        self._depth, self._in_string, self._escaped = 0, False, False
        self._scanned = 0        # characters of the buffer the scanner has seen
        self._stuck = False      # the buffer's start is not a call: the rest is content, at the end

    def feed(self, text: str) -> list[StreamEvent]:
        self._buffer += text
        if self._mode is None:
            head = self._buffer.lstrip()
            if not head or (PYTHON_TAG.startswith(head) and head != PYTHON_TAG):
                return []
            if head.startswith(PYTHON_TAG):
                self._buffer, self._mode = head[len(PYTHON_TAG):], "json"
            else:
                self._mode = "json" if head.startswith("{") else "text"
        if self._mode == "text":
            text, self._buffer = self._buffer, ""
            return self._content(text)
        return self._calls()

    def _calls(self) -> list[StreamEvent]:
        """Complete objects at the buffer's start, each read once its braces close."""
        events = []
        while not self._stuck:
            start = len(self._buffer) - len(self._buffer.lstrip(" \t\r\n;"))
            if start == len(self._buffer):
                return events
            if self._buffer[start] != "{":
                self._stuck = True
                return events
            end = self._object_end(start)
            if end is None:
                return events
            try:
                call = call_from_json(_DECODER.decode(self._buffer[start:end]))
            except json.JSONDecodeError:
                call = None
            if call is None:
                self._stuck = True
                return events
            events += self._call(call)
            self._buffer = self._buffer[end:]
            self._scanned = 0
        return events

    def _object_end(self, start: int) -> int | None:
        """Where the object that begins at ``start`` ends (its closing brace + 1), or None while open."""
        if self._scanned < start:
            self._scanned, self._depth, self._in_string, self._escaped = start, 0, False, False
        for i in range(self._scanned, len(self._buffer)):
            ch = self._buffer[i]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch == "{":
                self._depth += 1
            elif ch == "}":
                self._depth -= 1
                if self._depth == 0:
                    self._scanned = i + 1
                    return i + 1
        self._scanned = len(self._buffer)
        return None

    def finish(self) -> list[StreamEvent]:
        rest, self._buffer = self._buffer, ""
        events = self._content(rest if self._mode == "text" or self.num_calls == 0 else rest.strip(" \t\r\n;"))
        return events + self._end()


class Llama3JsonParser(ToolParser):
    name = "llama3_json"

    def stream(self) -> ToolStream:
        return _Llama3Stream()
