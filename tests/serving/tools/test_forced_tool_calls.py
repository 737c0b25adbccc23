"""The forced tool_choice's pieces that need no model: vLLM's schema for ``required`` (checked with
jsonschema: each item's parameters follow its own tool's schema) and the stream that reads calls out
of the constrained text, fed in any pieces (it reads as the whole text does)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from anydev.serving.protocol import APIError
from anydev.serving.tool_bodies import Tool
from anydev.serving.tools.forced import ForcedDeltas, required_schema

jsonschema = pytest.importorskip("jsonschema", reason="the schema is checked with jsonschema")

TOOLS = [Tool.model_validate({"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"$ref": "#/$defs/City"}}, "required": ["city"],
             "$defs": {"City": {"type": "string"}}}}}),
         Tool.model_validate({"type": "function", "function": {"name": "get_time"}})]
ANSWER = '[{"name":"get_weather","parameters":{"city":"a}b\\"c]"}},{"name":"get_time","parameters":{}}]'


def test_required_schema_ties_each_name_to_its_parameters():
    schema = required_schema(TOOLS, parallel=True)
    jsonschema.validate(json.loads(ANSWER), schema)
    jsonschema.validate([{"name": "get_time", "parameters": {}}], schema)   # no parameters declared: an object
    for wrong in ([], [{"name": "get_weather", "parameters": {}}], [{"name": "get_weather", "parameters": {"city": 1}}],
                  [{"name": "get_time"}], [{"name": "nope", "parameters": {}}],
                  [{"name": "get_time", "parameters": {}, "extra": 1}]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(ANSWER), required_schema(TOOLS, parallel=False))    # maxItems 1
    assert TOOLS[0].function.parameters["$defs"]          # the request's own schema is left as it was


def test_clashing_defs_are_a_400_naming_tools():
    other = Tool.model_validate({"type": "function", "function": {"name": "b", "parameters": {
        "type": "object", "$defs": {"City": {"type": "integer"}}}}})
    with pytest.raises(APIError) as error:
        required_schema([TOOLS[0], other], parallel=True)
    assert error.value.body()["error"]["param"] == "tools"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, len(ANSWER) - 1), unique=True).map(sorted))
def test_required_calls_read_the_same_in_any_pieces(cuts):
    stream = ForcedDeltas("")
    deltas = [d for a, b in zip([0, *cuts], [*cuts, len(ANSWER)]) for d in stream.feed(ANSWER[a:b])]
    deltas += stream.finish()
    calls = [d["tool_calls"][0] for d in deltas]
    assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [(0, "get_weather", {"city": 'a}b"c]'}), (1, "get_time", {})]


def test_a_named_call_is_the_whole_text_once_it_ends():
    stream = ForcedDeltas("get_time")
    assert stream.feed('{"zone"') == [] and stream.feed(": 3}") == []
    (delta,) = stream.finish()
    assert delta["tool_calls"][0]["function"] == {"name": "get_time", "arguments": '{"zone": 3}'}
