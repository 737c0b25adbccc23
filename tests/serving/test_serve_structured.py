"""Structured output through ``anydev serve`` (the demo model on the cpu backend, a subprocess on
127.0.0.1), driven by the ``openai`` client: ``beta.chat.completions.parse`` with a pydantic model,
``response_format`` json_object and json_schema, vLLM's ``structured_outputs`` (regex, choice,
grammar, json) on completions, streamed and not, and the 400s naming the field.

The demo model's weights are random: whatever it would write, the token mask keeps the answer in
the grammar, and greedy decoding of fixed weights is deterministic. The schemas bound their
strings and numbers, so every answer ends (with finish reason "stop") well within max_tokens."""
from __future__ import annotations

import json
import re
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, ConfigDict, Field

pytest.importorskip("llguidance", reason="structured output needs llguidance (pip install anydev[structured])")

from serve_support import MODEL, Server, request   # noqa: E402

MESSAGES = [{"role": "user", "content": "Describe a person."}]
EMAIL = r"[a-z]{3,8}@[a-z]{2,6}\.(com|org)"


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")      # additionalProperties: false, as the openai client sends it
    name: str = Field(max_length=10)
    age: int = Field(ge=0, le=120)
    role: Literal["admin", "user", "guest"]


@pytest.fixture(scope="module")
def server():
    srv = Server("--max-model-len", "512")
    yield srv
    code, out = srv.stop()
    assert code == 0, out


def test_parse_with_a_pydantic_model_returns_an_object_that_validates(server):
    for temperature in (0, 1):
        out = server.client().beta.chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=Person,
                                                          max_tokens=200, temperature=temperature, seed=7)
        choice = out.choices[0]
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, Person)
        assert Person.model_validate_json(choice.message.content) == choice.message.parsed


def test_json_object_is_valid_json_whole_and_streamed(server):
    client = server.client()
    body = dict(model=MODEL, messages=MESSAGES, max_tokens=300, temperature=0, response_format={"type": "json_object"})
    whole = client.chat.completions.create(**body)
    assert whole.choices[0].finish_reason == "stop", whole
    assert isinstance(json.loads(whole.choices[0].message.content), dict)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**body, stream=True)
                       if c.choices)
    assert streamed == whole.choices[0].message.content


def test_a_regex_constrained_completion_matches_the_regex(server):
    client = server.client()
    for seed in (1, 2, 3):
        out = client.completions.create(model=MODEL, prompt="Email:", max_tokens=64, temperature=1, seed=seed,
                                        extra_body={"structured_outputs": {"regex": EMAIL}})
        assert out.choices[0].finish_reason == "stop" and re.fullmatch(EMAIL, out.choices[0].text), out


def test_choice_grammar_and_a_schema_on_completions(server):
    client = server.client()

    def complete(constraint, **extra):
        out = client.completions.create(model=MODEL, prompt="Answer:", max_tokens=200, temperature=1, seed=5,
                                        extra_body={"structured_outputs": constraint}, **extra)
        assert out.choices[0].finish_reason == "stop", out
        return out.choices[0].text

    assert complete({"choice": ["yes", "no", "maybe"]}) in ("yes", "no", "maybe")
    assert re.fullmatch(r"(ab)+c", complete({"grammar": 'root ::= ("ab")+ "c"'}))
    schema = Person.model_json_schema()
    Person.model_validate_json(complete({"json": schema, "disable_any_whitespace": True}))
    text = complete({"json": schema})
    Person.model_validate_json(text)
    Person.model_validate_json(complete({"json": json.dumps(schema)}, n=2))
    response = client.completions.create(model=MODEL, prompt="Answer:", max_tokens=200, temperature=0,
                                         extra_body={"response_format": {"type": "json_schema", "json_schema": {
                                             "name": "person", "schema": schema}}})
    Person.model_validate_json(response.choices[0].text)


def test_without_a_constraint_the_tokens_are_unchanged(server):
    client = server.client()
    plain = client.completions.create(model=MODEL, prompt="Hello", max_tokens=16, temperature=0)
    text = client.completions.create(model=MODEL, prompt="Hello", max_tokens=16, temperature=0,
                                     extra_body={"response_format": {"type": "text"}})
    assert plain.choices[0].text == text.choices[0].text


@pytest.mark.parametrize("extra, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"structured_outputs": {"regex": "("}}, "structured_outputs.regex"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
    ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs.whitespace_pattern"),
    ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag"),
    ({"structured_outputs": {"json_object": True}, "response_format": {"type": "json_object"}}, "structured_outputs"),
])
def test_a_malformed_or_unsupported_constraint_is_a_400_naming_the_field(server, extra, param):
    with pytest.raises(openai.BadRequestError) as error:
        server.client().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, extra_body=extra)
    assert error.value.body["param"] == param, error.value.body


def test_the_published_schema_describes_the_fields(server):
    status, _, text = request(f"{server.url}/openapi.json")
    assert status == 200
    schema = json.loads(text)
    bodies = schema["components"]["schemas"]
    for name in ("ChatRequest", "CompletionRequest"):
        assert {"response_format", "structured_outputs"} <= set(bodies[name]["properties"])
    assert set(bodies["ResponseFormat"]["properties"]["type"]["enum"]) == {"text", "json_object", "json_schema"}
    assert {"json", "regex", "choice", "grammar", "json_object"} <= set(bodies["StructuredOutputs"]["properties"])
    assert "schema" in bodies["JsonSchemaFormat"]["properties"]
