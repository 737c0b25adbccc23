"""The tool-call parsers (serving/tools): each format's calls and content, whole and streamed in any
pieces (a stream and a whole answer read the same), and text that is not a call staying text."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from anydev.serving.protocol import APIError
from anydev.serving.tools import TOOL_PARSERS, HermesParser, Llama3JsonParser, ParsedCall, ToolUse

HERMES_TWO = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "note": "a}b\\"c"}}\n'
              '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
LLAMA_TWO = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "n": {"x": "}"}}}; ' \
            '{"name": "get_time", "arguments": {}}'
CASES = [
    (HermesParser(), HERMES_TWO, "Let me look.",
     [ParsedCall("get_weather", json.dumps({"city": "Paris", "note": 'a}b"c'})), ParsedCall("get_time", "{}")]),
    (HermesParser(), "no call here, only <tool text  ", "no call here, only <tool text  ", []),
    (HermesParser(), '<tool_call>{"name": "f", "arguments": {"a": 1}}', None, [ParsedCall("f", '{"a": 1}')]),
    (HermesParser(), '<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call> then',
     '<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call> then', []),            # bad JSON stays text
    (HermesParser(), '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>', []),
    (HermesParser(), '<tool_call>{"name": "f", "arguments": "{\\"a\\": 2}"}</tool_call>', None,
     [ParsedCall("f", '{"a": 2}')]),                                                    # arguments as JSON text
    (Llama3JsonParser(), LLAMA_TWO, None,
     [ParsedCall("get_weather", json.dumps({"city": "Paris", "n": {"x": "}"}})), ParsedCall("get_time", "{}")]),
    (Llama3JsonParser(), ' {"name": "f", "parameters": {"a": [1, 2]}}', None, [ParsedCall("f", '{"a": [1, 2]}')]),
    (Llama3JsonParser(), "The weather is {fine}.", "The weather is {fine}.", []),
    (Llama3JsonParser(), '{"name": "f", "parameters": {"a": 1}', '{"name": "f", "parameters": {"a": 1}', []),
    (Llama3JsonParser(), '{"city": "Paris"}', '{"city": "Paris"}', []),                 # an object, not a call
]


@pytest.mark.parametrize("parser, text, content, calls", CASES)
def test_a_whole_answer_reads_as_its_content_and_calls(parser, text, content, calls):
    parsed = parser.parse(text)
    assert (parsed.content, parsed.calls) == (content, calls)


def _streamed(parser, text: str, cuts: list[int]):
    stream = parser.stream()
    bounds = [0, *sorted(set(c % (len(text) + 1) for c in cuts)), len(text)]
    events = [e for a, b in zip(bounds, bounds[1:]) for e in stream.feed(text[a:b])] + stream.finish()
    return "".join(e.content for e in events), [e.call for e in events if e.call is not None]


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_a_stream_cut_anywhere_reads_as_the_whole_answer(case, cuts):
    parser, text, content, calls = case
    streamed_content, streamed_calls = _streamed(parser, text, cuts)
    assert streamed_calls == calls
    assert (streamed_content if streamed_content.strip() or not calls else None) == content


def test_a_call_is_handed_out_as_soon_as_its_text_is_complete():
    stream = HermesParser().stream()
    head, _, tail = HERMES_TWO.partition("</tool_call>")
    events = stream.feed(head)
    assert [e.content for e in events] == ["Let me look."] and not any(e.call for e in events)
    assert [e.call.name for e in stream.feed("</tool_call>") if e.call] == ["get_weather"]
    stream = Llama3JsonParser().stream()
    first = LLAMA_TWO.index(";")
    assert [e.call.name for e in stream.feed(LLAMA_TWO[:first]) if e.call] == ["get_weather"]


def test_required_and_named_choices_fail_clearly_when_the_answer_lacks_the_call():
    text = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    assert ToolUse(HermesParser(), "")._kept(HermesParser().parse(text).calls)
    message = ToolUse(HermesParser(), "get_weather").message(text)
    assert message["content"] is None and message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert message["tool_calls"][0]["id"].startswith("call_")
    for required, answer in (("", "It is sunny."), ("get_time", text)):
        with pytest.raises(APIError) as error:
            ToolUse(HermesParser(), required).message(answer)
        assert error.value.status == 500 and error.value.code == "tool_call_not_parsed"
    assert ToolUse(HermesParser(), None).message("It is sunny.") == {"role": "assistant", "content": "It is sunny."}


def test_parallel_tool_calls_false_keeps_the_first_call_only():
    message = ToolUse(HermesParser(), None, parallel=False).message(HERMES_TWO)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    deltas = ToolUse(HermesParser(), None, parallel=False).stream()
    names = [d["tool_calls"][0]["function"]["name"] for d in deltas.feed(HERMES_TWO) + deltas.finish()
             if "tool_calls" in d]
    assert names == ["get_weather"]


def test_the_server_flag_names_every_parser():
    from anydev.serving.server import TOOL_CALL_PARSERS
    assert sorted(TOOL_CALL_PARSERS) == sorted(TOOL_PARSERS)
    assert all(TOOL_PARSERS[name].name == name for name in TOOL_PARSERS)
