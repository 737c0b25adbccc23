"""Structured output: what a request's text must match (a JSON schema, any JSON object, a regex, a
grammar, one of a few choices), as llguidance grammars.

llguidance (an optional dependency: ``pip install anydev[structured]``) turns each kind into its
grammar format; the sampling rank runs a matcher per sequence over it (:mod:`.grammar_matchers`).
A finished grammar allows only the end-of-sequence tokens, so such a request ends as an EOS does
(finish reason ``eos``, the API's "stop").
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import EngineConfigError

#: The kinds of constraint, as vLLM's ``StructuredOutputsParams`` names them.
KINDS = ("json", "json_object", "regex", "grammar", "choice")
#: The pip extra that installs the grammar library.
EXTRA = "anydev[structured]"


class GrammarLibraryMissing(EngineConfigError):
    """llguidance is not installed; structured output needs it."""

    def __init__(self):
        super().__init__(f"structured output needs the llguidance package: pip install llguidance "
                         f"(or pip install '{EXTRA}')")


@dataclass(frozen=True)
class StructuredOutput:
    """One constraint on a request's output: ``kind`` (one of :data:`KINDS`) and its ``spec``: a JSON
    schema as JSON text (``json``), a regex, a Lark or GBNF grammar, a JSON list of strings
    (``choice``); ``json_object`` takes no spec (""). ``compact``: JSON with no whitespace between
    its tokens (otherwise JSON's whitespace is allowed where JSON allows it)."""

    kind: str
    spec: str = ""
    compact: bool = False

    def validate(self) -> None:
        """Raise :class:`EngineConfigError` naming what is wrong (the kind, or the grammar llguidance
        cannot build, with its message); :class:`GrammarLibraryMissing` without llguidance."""
        if self.kind not in KINDS:
            raise EngineConfigError(f"structured output kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.spec, str) or not isinstance(self.compact, bool):
            raise EngineConfigError("a structured output's spec is text and compact true or false")
        llguidance = library()
        error = llguidance.LLMatcher.validate_grammar(self.grammar())
        if error:
            raise EngineConfigError(f"the {self.kind} constraint cannot be built: {error.strip()}")

    def grammar(self) -> str:
        """The llguidance grammar (its JSON text) of this constraint."""
        llguidance = library()
        options = {"whitespace_flexible": False} if self.compact else None
        try:
            if self.kind == "json":
                return llguidance.LLMatcher.grammar_from_json_schema(self.spec, defaults=options)
            if self.kind == "json_object":
                return llguidance.LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=options)
            if self.kind == "choice":
                choices = json.loads(self.spec)
                if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
                    raise ValueError("choice takes a non-empty list of strings")
                return llguidance.grammar_from("choice", choices)
            return llguidance.grammar_from(self.kind, self.spec)
        except ValueError as exc:   # llguidance's own word on a malformed schema, regex or grammar
            raise EngineConfigError(f"the {self.kind} constraint cannot be built: {exc}") from exc


def library():
    """The llguidance module, or :class:`GrammarLibraryMissing`."""
    try:
        import llguidance
    except ImportError:
        raise GrammarLibraryMissing() from None
    return llguidance
