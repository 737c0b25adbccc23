"""The request bodies' parts about structured output: OpenAI's ``response_format`` and vLLM's
``structured_outputs`` extension, read into the engine's :class:`StructuredOutput`.

``response_format``: ``text`` (no constraint), ``json_object`` (any JSON object), ``json_schema``
(its ``json_schema.schema``). ``structured_outputs`` (vLLM's names, chat and completions): exactly
one of ``json`` (a schema, as an object or its JSON text), ``regex``, ``choice`` (a list of
strings), ``grammar`` (Lark or llama.cpp's GBNF), ``json_object`` (true), and
``disable_any_whitespace`` (JSON without whitespace between its tokens).
"""
from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from anydev.core.errors import EngineConfigError
from anydev.core.sched.structured import GrammarLibraryMissing, StructuredOutput


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    name: str = Field(max_length=64)
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema", description="the JSON schema the answer follows")
    strict: bool | None = Field(None, description="accepted; the answer always follows the schema")


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, description="with type json_schema: the schema")


class StructuredOutputs(BaseModel):
    """vLLM's ``structured_outputs``: one constraint on the answer."""

    model_config = ConfigDict(extra="forbid", strict=True)
    json_: dict | str | None = Field(None, alias="json", description="a JSON schema (an object or its JSON text)")
    regex: str | None = Field(None, description="a regular expression (Rust regex syntax) the answer matches whole")
    choice: list[str] | None = Field(None, min_length=1, description="the answer is exactly one of these")
    grammar: str | None = Field(None, description="a Lark or GBNF (llama.cpp) grammar the answer follows")
    json_object: bool | None = Field(None, description="true: the answer is a JSON object")
    disable_any_whitespace: bool = Field(False, description="JSON without whitespace between its tokens")


class BadStructuredOutput(Exception):
    """A request's structured output cannot run: ``param`` names the field (the route answers 400)."""

    def __init__(self, message: str, param: str, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def structured_output(response_format: ResponseFormat | None, extension: StructuredOutputs | None) -> \
        StructuredOutput | None:
    """The constraint a request asks for (None: none), checked: an :class:`~.protocol.APIError` 400
    naming the field when it is malformed, when both fields ask, or when llguidance is missing."""
    asked = response_format is not None and response_format.type != "text"
    if asked and extension is not None:
        raise BadStructuredOutput("give response_format or structured_outputs, not both", param="structured_outputs")
    if asked:
        param, structured = _from_response_format(response_format)
    elif extension is not None:
        param, structured = _from_extension(extension)
    else:
        return None
    try:
        structured.validate()
    except GrammarLibraryMissing as exc:
        raise BadStructuredOutput(f"{param}: {exc}", param=param.split(".")[0], code="unsupported_parameter") from None
    except EngineConfigError as exc:
        raise BadStructuredOutput(f"{param}: {exc}", param=param) from None
    return structured


def _from_response_format(response_format: ResponseFormat) -> tuple[str, StructuredOutput]:
    """The field that asks (for errors) and its constraint."""
    if response_format.type == "json_object":
        if response_format.json_schema is not None:
            raise BadStructuredOutput("response_format json_object takes no json_schema", param="response_format.json_schema")
        return "response_format", StructuredOutput("json_object")
    if response_format.json_schema is None or response_format.json_schema.schema_ is None:
        raise BadStructuredOutput("response_format json_schema needs json_schema.schema", param="response_format.json_schema")
    return "response_format.json_schema.schema", StructuredOutput("json", json.dumps(response_format.json_schema.schema_))


def _from_extension(extension: StructuredOutputs) -> tuple[str, StructuredOutput]:
    """The field that asks (for errors) and its constraint."""
    asked = {name: value for name, value in (("json", extension.json_), ("regex", extension.regex),
                                             ("choice", extension.choice), ("grammar", extension.grammar),
                                             ("json_object", extension.json_object or None)) if value is not None}
    if len(asked) != 1:
        raise BadStructuredOutput(f"structured_outputs takes exactly one of json, regex, choice, grammar, json_object; "
                            f"got {', '.join(asked) or 'none'}", param="structured_outputs")
    (kind, value), = asked.items()
    if kind == "json":
        spec = value if isinstance(value, str) else json.dumps(value)
    elif kind == "choice":
        spec = json.dumps(value)
    else:
        spec = "" if kind == "json_object" else value
    return f"structured_outputs.{kind}", StructuredOutput(kind, spec, compact=extension.disable_any_whitespace)
