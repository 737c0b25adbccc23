"""``tool_choice`` required and named, enforced by a grammar (llguidance), through ``anydev serve
--tool-call-parser hermes`` with the demo model (a subprocess on 127.0.0.1), driven by the ``openai``
client, whole and streamed. The demo model's weights are random: asked with tool_choice auto it
writes no valid call (the contrast); forced, every call names one of the tools and its arguments
validate against that tool's schema. The schemas bound their strings and numbers, so each answer
ends well within max_tokens; greedy decoding of fixed weights is deterministic."""
from __future__ import annotations

import json

import openai
import pytest

pytest.importorskip("llguidance", reason="enforced tool_choice needs llguidance (pip install anydev[structured])")
jsonschema = pytest.importorskip("jsonschema", reason="the arguments are checked with jsonschema")

from serve_support import MODEL, Server   # noqa: E402

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 12}},
        "required": ["zone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server():
    srv = Server("--tool-call-parser", "hermes", "--max-model-len", "512")
    yield srv
    code, out = srv.stop()
    assert code == 0, out
    assert "tool_choice required and named are enforced by a grammar" in out


def _ask(srv, choice, **extra):
    return srv.client().chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice,
                                                temperature=0, **{"max_tokens": 200, **extra})


def _streamed(srv, choice, **extra):
    """The calls joined from the deltas of each index, as the openai client's users do; the finish reason."""
    calls, reason = {}, None
    for chunk in _ask(srv, choice, stream=True, **extra):
        choice_ = chunk.choices[0]
        assert not choice_.delta.content
        for delta in choice_.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
        reason = choice_.finish_reason or reason
    return [calls[i] for i in sorted(calls)], reason


def _valid(name: str, arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_unconstrained_the_demo_model_writes_no_call(server):
    out = _ask(server, "auto")
    assert out.choices[0].message.tool_calls is None and out.choices[0].message.content


def _check_calls(calls) -> None:
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_") and call.function.name in SCHEMAS
        _valid(call.function.name, call.function.arguments)


def test_required_without_parallel_calls_gives_one_valid_call(server):
    choice = _ask(server, "required", parallel_tool_calls=False).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    _check_calls(choice.message.tool_calls)


def test_required_cut_by_max_tokens_keeps_its_complete_calls(server):
    # The random weights never close the array: max_tokens cuts it; every complete item is a valid call.
    choice = _ask(server, "required", max_tokens=120).choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    assert len(choice.message.tool_calls) >= 2
    _check_calls(choice.message.tool_calls)


@pytest.mark.parametrize("extra", [{"max_tokens": 120}, {"parallel_tool_calls": False}])
def test_required_streamed_gives_the_whole_answer_s_calls(server, extra):
    whole = _ask(server, "required", **extra).choices[0]
    calls, reason = _streamed(server, "required", **extra)
    assert reason == whole.finish_reason
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls]
    assert all(c["id"].startswith("call_") for c in calls)


@pytest.mark.parametrize("name", ["get_weather", "get_time"])
def test_a_named_function_gives_exactly_that_call(server, name):
    named = {"type": "function", "function": {"name": name}}
    choice = _ask(server, named).choices[0]
    assert choice.finish_reason == "stop"          # OpenAI's and vLLM's answer for a forced function
    assert [c.function.name for c in choice.message.tool_calls] == [name]
    _valid(name, choice.message.tool_calls[0].function.arguments)
    calls, reason = _streamed(server, named)
    assert reason == "stop" and [c["name"] for c in calls] == [name]
    assert json.loads(calls[0]["arguments"]) == json.loads(choice.message.tool_calls[0].function.arguments)


def test_required_with_tools_whose_defs_clash_is_a_400_naming_tools(server):
    def tool(name, kind):
        return {"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}, "$defs": {"X": {"type": kind}}}}}
    with pytest.raises(openai.BadRequestError) as error:
        server.client().chat.completions.create(model=MODEL, messages=ASK, tool_choice="required", max_tokens=8,
                                                tools=[tool("a", "string"), tool("b", "integer")])
    assert error.value.body["param"] == "tools" and "$defs/X" in error.value.body["message"]
