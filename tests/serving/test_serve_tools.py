"""Tool calls through ``anydev serve --tool-call-parser`` (a subprocess on 127.0.0.1), driven by the
``openai`` client: tools and tool_choice auto, required and named, whole and streamed, for the
hermes and llama3_json formats, on a server without llguidance (required and named asked through
the prompt only; test_serve_forced_tools.py tests them enforced). The model is
tests/support/scripted_checkpoint.py's: its greedy answer is a fixed call of get_weather in its family's format, so what the server returns is decided
by the parser, not by chance. The conversation with tools is rendered as HF transformers'
apply_chat_template(tools=...) renders it."""
from __future__ import annotations

import json

import openai
import pytest

from anydev.core.loading.checkpoint import open_checkpoint
from anydev.serving.prompts import template_message
from anydev.serving.protocol import ChatRequest
from scripted_checkpoint import write_scripted_checkpoint
from no_llguidance import env_without_llguidance
from serve_support import MODEL, Server

TOOLS = [{"type": "function", "function": {
              "name": "get_weather", "description": "the weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALLED = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
              {"id": "call_1", "type": "function",
               "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]


@pytest.fixture(scope="module", params=["hermes", "llama3_json"])
def family(request, tmp_path_factory):
    directory = write_scripted_checkpoint(tmp_path_factory.mktemp(request.param) / "scripted", request.param)
    hidden = env_without_llguidance(tmp_path_factory.mktemp("no-llguidance"))   # the prompt-only tool_choice
    srv = Server("--model", str(directory), "--tool-call-parser", request.param, "--max-model-len", "1024", env=hidden)
    yield request.param, directory, srv
    code, out = srv.stop()
    assert code == 0, out
    assert "tool_choice required and named are asked through the prompt only, not enforced" in out


def _ask(srv, **extra):
    return srv.client().chat.completions.create(model="scripted", messages=ASK, tools=TOOLS, temperature=0,
                                                max_tokens=32, **extra)


def _streamed(srv, **extra):
    """The streamed answer put together as the openai client's users do: content, and each call's
    id, name and arguments joined from the deltas of its index; with the finish reason."""
    content, calls, reason = "", {}, None
    for chunk in _ask(srv, stream=True, **extra):
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += (delta.function.name or "") if delta.function else ""
            call["arguments"] += (delta.function.arguments or "") if delta.function else ""
        reason = choice.finish_reason or reason
    return content, [calls[i] for i in sorted(calls)], reason


@pytest.mark.parametrize("choice", [None, "auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_the_answer_s_call_is_returned_whole(family, choice):
    _, _, srv = family
    out = _ask(srv, **({} if choice is None else {"tool_choice": choice}))
    message = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls" and message.content is None
    assert [(c.type, c.function.name) for c in message.tool_calls] == [("function", "get_weather")]
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert message.tool_calls[0].id.startswith("call_")


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_the_answer_s_call_is_streamed_as_deltas(family, choice):
    _, _, srv = family
    content, calls, reason = _streamed(srv, tool_choice=choice)
    assert reason == "tool_calls" and content == ""
    assert [c["name"] for c in calls] == ["get_weather"] and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_a_named_choice_the_answer_does_not_call_fails_clearly(family):
    _, _, srv = family
    named = {"type": "function", "function": {"name": "get_time"}}
    with pytest.raises(openai.InternalServerError) as error:
        _ask(srv, tool_choice=named)
    assert error.value.body["code"] == "tool_call_not_parsed"
    with pytest.raises(openai.APIError) as error:
        _streamed(srv, tool_choice=named)
    assert "get_time" in str(error.value)


def test_tool_choice_none_leaves_the_answer_as_text(family):
    name, _, srv = family
    out = _ask(srv, tool_choice="none")
    assert out.choices[0].message.tool_calls is None and out.choices[0].finish_reason == "stop"
    assert "get_weather" in out.choices[0].message.content


def test_the_conversation_with_tools_renders_as_transformers_renders_it(family):
    import transformers
    _, directory, srv = family
    body = ChatRequest(model="scripted", messages=CALLED, tools=TOOLS)
    ours = open_checkpoint(directory).tokenizer.apply_chat_template(
        [template_message(m, i) for i, m in enumerate(body.messages)], add_generation_prompt=True,
        tools=[t.model_dump(exclude_none=True) for t in body.tools])
    hf_messages = json.loads(json.dumps(CALLED))
    hf_messages[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}   # HF templates take an object
    hf = transformers.AutoTokenizer.from_pretrained(directory)
    theirs = hf.apply_chat_template(hf_messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert ours == theirs and "get_time" in ours and "sunny, 21 C" in ours
    out = srv.client().chat.completions.create(model="scripted", messages=CALLED, tools=TOOLS, temperature=0,
                                               max_tokens=32)
    assert out.usage.prompt_tokens == len(hf.encode(theirs, add_special_tokens=False))


def test_a_server_without_a_parser_refuses_tools_and_reads_text_for_none():
    srv = Server("--max-model-len", "256")
    try:
        client = srv.client()
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=4)
        assert error.value.body["param"] == "tools" and "--tool-call-parser" in error.value.body["message"]
        out = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=4)
        assert out.choices[0].message.tool_calls is None
        bad = [*ASK, {"role": "tool", "content": "x"}]
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model=MODEL, messages=bad, max_tokens=4)
        assert error.value.body["param"] == "messages.1.tool_call_id"
    finally:
        code, out = srv.stop()
    assert code == 0, out


def test_the_openapi_schema_describes_the_tool_fields(family):
    from serve_support import request
    name, _, srv = family
    schema = json.loads(request(f"{srv.url}/openapi.json")[2])
    bodies = schema["components"]["schemas"]
    chat = bodies["ChatRequest"]["properties"]
    assert name in chat["tools"]["description"] and chat["tools"]["anyOf"][0]["items"]["$ref"].endswith("/Tool")
    assert {"enum": ["none", "auto", "required"], "type": "string"} in chat["tool_choice"]["anyOf"]
    assert {"$ref": "#/components/schemas/NamedToolChoice"} in chat["tool_choice"]["anyOf"]
    assert bodies["FunctionDefinition"]["properties"]["name"]["pattern"] == "^[a-zA-Z0-9_-]{1,64}$"
    message = bodies["ChatMessage"]["properties"]
    assert "tool" in message["role"]["enum"] and {"tool_calls", "tool_call_id"} <= set(message)
    assert "tool_call_not_parsed" in schema["paths"]["/v1/chat/completions"]["post"]["responses"]["500"]["description"]
