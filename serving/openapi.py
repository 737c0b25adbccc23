"""The app's OpenAPI schema as the server answers: the error bodies it sends, the served model and limits."""
from __future__ import annotations

from fastapi import FastAPI

from .limits import ServerLimits
from .protocol import ErrorBody, describe_limits


def error_doc(description: str) -> dict:
    """An answer of the schema with the OpenAI error body."""
    return {"model": ErrorBody, "description": description}


def document_errors_as_answered(app: FastAPI, model_name: str, limits: ServerLimits) -> None:
    """The OpenAPI schema without FastAPI's 422 validation answer (this server answers 400 with the
    OpenAI error body instead), and with the served model id and the max_tokens limit."""
    generate = app.openapi
    vocab_size = app.state.anydev.engine.info.vocab_size

    def openapi() -> dict:
        schema = generate()
        describe_limits(schema, model_name, limits.max_tokens, vocab_size)
        _describe_tool_parser(schema, app.state.anydev.tool_parser)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        return schema

    app.openapi = openapi


def _describe_tool_parser(schema: dict, parser) -> None:
    """Say in ``tools``' description which parser reads the answers' calls, or that tools answer 400."""
    tools = schema.get("components", {}).get("schemas", {}).get("ChatRequest", {}).get("properties", {}).get("tools")
    if tools is not None:
        note = (f"this server reads calls with the '{parser.name}' parser" if parser is not None else
                "this server has no --tool-call-parser: tools (with tool_choice other than none) answer 400")
        tools["description"] = f"{tools.get('description', '')}; {note}".lstrip("; ")
