"""Hermes-style tool calls (Qwen2.5/Qwen3, NousResearch Hermes): ``<tool_call>{json}</tool_call>`` blocks.

Each block holds ``{"name": ..., "arguments": {...}}``; text before the first block is content. A
block left open at the end of the answer is read to the end. Parser name: ``hermes``.
"""
from __future__ import annotations

import json

from .base import StreamEvent, ToolParser, ToolStream, call_from_json, held_prefix

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class _HermesStream(ToolStream):
    def __init__(self):
        super().__init__()
        self._buffer = ""
        self._in_call = False

    def feed(self, text: str) -> list[StreamEvent]:
        self._buffer += text
        events = []
        while True:
            if self._in_call:
                end = self._buffer.find(CLOSE)
                if end < 0:
                    return events
                events += self._block(self._buffer[:end], closed=True)
                self._buffer, self._in_call = self._buffer[end + len(CLOSE):], False
                continue
            start = self._buffer.find(OPEN)
            if start < 0:
                keep = held_prefix(self._buffer, OPEN)
                settled = self._buffer[:len(self._buffer) - keep]
                self._buffer = self._buffer[len(settled):]
                return events + self._content(settled)
            events += self._content(self._buffer[:start])
            self._buffer, self._in_call = self._buffer[start + len(OPEN):], True

    def _block(self, body: str, closed: bool) -> list[StreamEvent]:
        try:
            call = call_from_json(json.loads(body))
        except json.JSONDecodeError:
            call = None
        if call is not None:
            return self._call(call)
        return self._content(OPEN + body + (CLOSE if closed else ""))     # not a call: it stays text

    def finish(self) -> list[StreamEvent]:
        rest, self._buffer = self._buffer, ""
        events = self._block(rest, closed=False) if self._in_call else self._content(rest)
        self._in_call = False
        return events + self._end()


class HermesParser(ToolParser):
    name = "hermes"

    def stream(self) -> ToolStream:
        return _HermesStream()
