"""The door's rules (app/limits.py) in JSON Schema's words, for the OpenAPI document.

Pydantic prints the schema of a field from its type and constraints; the validators that
refuse NUL characters, blank content, out-of-range times or unstorable JSON are code, which
it cannot print. These annotations add what they enforce (patterns, numeric ranges, a
recursive `StorableJson` component), so a client generated from, or checking requests
against, the document refuses what the door refuses. Patterns use only syntax that both
ECMA 262 and Python's re read, and that validators on Unicode scalars (Rust's regex)
compile: lone surrogates, which no UTF-8 JSON text holds, are left out.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

from pydantic import GetJsonSchemaHandler, TypeAdapter
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from typing_extensions import TypeAliasType

# Text Postgres can store (no NUL).
STORABLE_PATTERN = r"^[^\x00]*$"


@dataclass(frozen=True)
class Declared:
    """JSON Schema keywords a field's validators enforce, added to the field's schema;
    `keywords` is called when a schema is made (never on the request path)."""

    keywords: Callable[[], dict[str, Any]]
    replace: bool = False  # the keywords are the whole schema (pydantic's is dropped)

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        if self.replace:
            return self.keywords()
        schema = handler(core_schema)
        schema.update(self.keywords())
        return schema


def _class_of(codepoints: Sequence[int]) -> str:
    """A regex character class body listing these code points, runs as ranges (literal
    characters, escaped where the class syntax would read them)."""
    runs: list[list[int]] = []
    for point in sorted(codepoints):
        if runs and runs[-1][1] == point - 1:
            runs[-1][1] = point
        else:
            runs.append([point, point])

    def one(point: int) -> str:
        char = chr(point)
        return "\\" + char if char in "\\]^-[" else char

    return "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in runs)


@cache
def _blank_codepoints(*, invisible: bool) -> tuple[int, ...]:
    """Whitespace (str.isspace), and with `invisible` format characters (category Cf): the
    characters blank_problem and str.strip see through. All lie below U+E0080."""
    return tuple(
        point
        for point in range(0xE0080)
        if not 0xD800 <= point <= 0xDFFF
        and (chr(point).isspace() or (invisible and unicodedata.category(chr(point)) == "Cf"))
    )


def visible_pattern(*, invisible: bool = True) -> str:
    """Storable text holding a character that is neither blank nor (with `invisible`) an
    invisible format character: one such character between storable runs."""
    blank = _class_of(list(_blank_codepoints(invisible=invisible)))
    storable = "\\x00"
    return f"^[^{storable}]*[^{storable}{blank}][^{storable}]*$"


@cache
def procedure_query_pattern() -> str:
    """A procedure's query: storable, with a character its normalised pattern keeps
    (app/scoring/procedural.normalise_pattern drops whitespace and the punctuation around
    it; a query of nothing else is refused). Only characters that are punctuation,
    separators, controls, format characters, spaces or compatibility forms can vanish, so
    only those are tried."""
    from app.scoring.procedural import normalise_pattern

    vanishing = [
        point
        for point in range(0x110000)
        if not 0xD800 <= point <= 0xDFFF
        and (
            unicodedata.category(chr(point))[0] in "PZ"
            or unicodedata.category(chr(point)) in ("Cc", "Cf")
            or chr(point).isspace()
            or unicodedata.decomposition(chr(point)).startswith("<")
        )
        and normalise_pattern(chr(point)) == ""
    ]
    return f"^[^\\x00]*[^\\x00{_class_of(vanishing)}][^\\x00]*$"


# A procedure's query, as an annotation (POST /v1/procedures, GET /v1/procedures/suggest).
PROCEDURE_QUERY = Declared(lambda: {"pattern": procedure_query_pattern()})


@dataclass(frozen=True)
class _JsonSchemaOf:
    """The schema of `build(value)` where value is the StorableJson component's reference,
    registered beside the document's other components."""

    build: Callable[[JsonSchemaValue], dict[str, Any]]

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return self.build(handler(_storable_json().core_schema))


# Storable text, as an annotation.
STORABLE = Declared(lambda: {"pattern": STORABLE_PATTERN})
_KEYS = Declared(lambda: {"propertyNames": {"pattern": STORABLE_PATTERN}})
# Plain JSON whose strings and keys are storable; depth and byte caps are the validators'.
StorableJson = TypeAliasType(
    "StorableJson",
    Annotated[str, STORABLE]
    | float
    | bool
    | list["StorableJson"]
    | Annotated[dict[str, "StorableJson"], _KEYS]
    | None,
)


@cache
def _storable_json() -> TypeAdapter[Any]:
    return TypeAdapter(StorableJson)


def json_object_schema() -> _JsonSchemaOf:
    """An object of storable JSON (metadata)."""
    return _JsonSchemaOf(
        lambda value: {
            "type": "object",
            "propertyNames": {"pattern": STORABLE_PATTERN},
            "additionalProperties": value,
        }
    )


def step_schema() -> _JsonSchemaOf:
    """A procedure step: a tool name, or an object of storable JSON naming its tool."""

    def build(value: JsonSchemaValue) -> dict[str, Any]:
        name = {"type": "string", "minLength": 1, "pattern": visible_pattern(invisible=False)}
        named = {
            "type": "object",
            "properties": {"tool": name},
            "required": ["tool"],
            "propertyNames": {"pattern": STORABLE_PATTERN},
            "additionalProperties": value,
        }
        return {"anyOf": [name, named]}

    return _JsonSchemaOf(build)


def time_schema(pattern: str, ms_above: float, max_s: float) -> dict[str, Any]:
    """Text matching `pattern`, or epoch seconds up to `max_s`, or milliseconds above
    `ms_above` up to the same time."""
    # No `format: date-time`: a time without its offset (UTC) or seconds is read too.
    text = {"type": "string", "pattern": pattern}
    seconds = {"type": "number", "minimum": 0, "maximum": max_s}
    millis = {"type": "number", "exclusiveMinimum": ms_above, "maximum": max_s * 1000}
    return {"anyOf": [text, seconds, millis]}
