"""The OpenAPI document states what the door enforces: the patterns it declares accept
exactly the text the validators accept, and no constraint is printed in pydantic's own
words, which JSON Schema ignores."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from functools import cache
from types import SimpleNamespace
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.api.app import create_app
from app.declared import STORABLE_PATTERN, visible_pattern
from app.layers.semantic import listing
from app.limits import blank_problem, text_problem
from app.services.search_models import SearchRequest

# Text drawn around the characters the rules are about, and from everywhere else. No lone
# surrogate: UTF-8 JSON cannot carry one, so the patterns leave that part of the rule out.
_EDGES = "\x00 \t\n\x1c\x85\xa0\u200b\u200e\u2060\ufeff\U000e0020\U0001d173a-]^\\"
TEXT = st.text(st.sampled_from(_EDGES) | st.characters(exclude_categories=["Cs"]), max_size=12)


@cache
def _document() -> dict[str, Any]:
    return create_app().openapi()


def _walk(value: Any, path: str = "") -> Any:
    if isinstance(value, dict):
        for key, child in value.items():
            yield path, key, child
            yield from _walk(child, f"{path}/{key}")
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _walk(child, f"{path}[{i}]")


@given(TEXT)
def test_the_storable_pattern_is_the_storable_rule(value: str) -> None:
    assert (re.search(STORABLE_PATTERN, value) is not None) == (text_problem(value) is None)


@given(TEXT)
def test_the_visible_pattern_is_the_content_rule(value: str) -> None:
    accepted = text_problem(value) is None and blank_problem(value) is None
    assert (re.search(visible_pattern(), value) is not None) == accepted


@given(TEXT)
def test_the_tool_name_pattern_is_the_step_rule(value: str) -> None:
    accepted = text_problem(value) is None and value.strip() != ""
    assert (re.search(visible_pattern(invisible=False), value) is not None) == accepted


def test_no_constraint_is_printed_in_pydantic_words_and_every_pattern_is_portable() -> None:
    document = _document()
    leaked = [
        f"{path}/{key}"
        for path, key, _ in _walk(document)
        if key in {"ge", "le", "gt", "lt"} and not path.endswith("/properties")
    ]
    assert leaked == []
    patterns = [child for _, key, child in _walk(document) if key == "pattern"]
    assert patterns
    for pattern in patterns:
        # Python's re, and a validator on Unicode scalars (Rust's regex, as the fuzzers use).
        re.compile(pattern)
        checker = jsonschema_rs.validator_for({"type": "string", "pattern": pattern})
        assert checker.is_valid("\x00") is False or "\\x00" not in pattern
    schemas = document["components"]["schemas"]
    budget = schemas["ContextRequest"]["properties"]["token_budget"]
    assert {"minimum": 50, "maximum": 200_000}.items() <= budget["anyOf"][0].items()
    # Metadata values are storable JSON all the way down, not only its keys.
    metadata = schemas["MemoryIn"]["properties"]["metadata"]
    assert metadata["additionalProperties"] == {"$ref": "#/components/schemas/StorableJson"}
    json_value = jsonschema_rs.validator_for(
        {**schemas["StorableJson"], "components": {"schemas": schemas}}
    )
    assert json_value.is_valid({"a": [1, {"b": "ok"}], "c": None})
    assert not json_value.is_valid({"a": [1, {"b": "no\x00"}]})
    assert not json_value.is_valid({"a": {"k\x00": 1}})


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(2200, 1, 1),
        timezones=st.just(UTC),
    ),
    st.uuids(),
)
def test_a_cursor_names_its_row_exactly_and_matches_its_pattern(
    at: datetime, row_id: uuid.UUID
) -> None:
    cursor = listing.encode_cursor(SimpleNamespace(occurred_at=at, id=row_id))
    assert re.fullmatch(listing.CURSOR_PATTERN, cursor)
    assert listing.decode_cursor(cursor) == (at, row_id)


@pytest.mark.parametrize(
    "cursor",
    ["", "1_" + "0" * 31, "1_" + "A" * 32, "1" * 17 + "_" + "0" * 32, "x_" + "0" * 32],
)
def test_text_that_is_no_cursor_is_refused(cursor: str) -> None:
    with pytest.raises(ValueError, match="bad cursor"):
        listing.decode_cursor(cursor)


def test_the_latest_cursor_the_pattern_allows_is_a_time() -> None:
    at, _ = listing.decode_cursor("9" * 16 + "_" + "f" * 32)
    assert at == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=10**16 - 1)


@pytest.mark.parametrize(
    "value", [True, "0", "1700000000", "2024-05-01", -1, 2e10, 7_258_118_400_001, float("nan")]
)
def test_a_request_time_is_rfc3339_text_or_epoch_seconds_in_range(value: object) -> None:
    with pytest.raises(ValidationError, match=r"RFC 3339|seconds since 1970"):
        SearchRequest(user_id="u", query="q", since=value)


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T14:00:00.0+02:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01 12:00", datetime(2024, 5, 1, 12)),
        (1_714_564_800, datetime(2024, 5, 1, 12, tzinfo=UTC)),
        (1_714_564_800_000, datetime(2024, 5, 1, 12, tzinfo=UTC)),
    ],
)
def test_rfc3339_naive_and_epoch_times_are_read(value: object, read: datetime) -> None:
    assert SearchRequest(user_id="u", query="q", until=value).until == read


_EVENTS = [
    {"type": "turn", "user_id": "u", "external_id": "m1", "role": "user", "content": "hi"},
    {"type": "turn", "user_id": "u", "external_id": "m1", "role": "user", "content": "a\x00b"},
    {"type": "turn", "user_id": "u", "role": "user", "content": "no external id"},
    {"type": "turn", "user_id": "u", "external_id": "m1", "role": "robot", "content": "hi"},
    {"type": "turn", "user_id": "u", "external_id": "m", "role": "user", "content": "x", "z": 1},
    {"type": "typing_start", "user_id": "u", "timestamp": "2024-05-01T12:00:00Z"},
    {"type": "typing_start", "user_id": "u", "timestamp": 1_714_564_800},
    {"type": "typing_start", "user_id": "u", "timestamp": "1714564800"},
    {"type": "typing_start", "user_id": "u", "timestamp": "1969-05-01T12:00:00Z"},
    {"type": "presence_change", "user_id": "u", "status": "away"},
    {"type": "presence_change", "user_id": "u", "status": "asleep"},
    {"type": "tool_run", "user_id": "u", "tool": "search", "arguments": {"q": ["a", 1]}},
    {"type": "tool_run", "user_id": "u", "tool": "search", "arguments": {"q": ["a\x00"]}},
    {"type": "tool_run", "user_id": "u", "tool": "t", "success": True, "duration_ms": 12},
    {"type": "tool_run", "user_id": "u", "tool": "t", "duration_ms": False},
    {"type": "tool_run", "user_id": "u", "tool": "t", "success": "yes"},
    {"type": "sensor.reading", "user_id": "u", "payload": {"celsius": 21.5}},
    {"type": "Sensor", "user_id": "u"},
    {"type": "sensor.reading", "user_id": "u", "payload": {"k\x00": 1}},
    {"type": "turn", "user_id": "u"},
    {"user_id": "u"},
    {"type": "typing_start", "user_id": "bad id"},
]


@pytest.mark.parametrize("event", _EVENTS)
def test_an_event_item_is_declared_as_the_door_reads_it(event: dict[str, Any]) -> None:
    """The schema of POST /v1/events' items and the door (parse_event, with the key's
    tenant filled in) accept and refuse the same events."""
    from app.streams.events import EventValidationError, parse_event

    schemas = _document()["components"]["schemas"]
    item = schemas["EventBatch"]["properties"]["events"]["items"]
    checker = jsonschema_rs.validator_for({**item, "components": {"schemas": schemas}})
    try:
        parse_event({**event, "tenant_id": "t"})
        door = True
    except EventValidationError:
        door = False
    assert checker.is_valid(event) is door


@given(st.dates(), st.times())
def test_the_time_patterns_hold_the_calendar(day: Any, clock: Any) -> None:
    """Every real day matches, written as RFC 3339; the in-range pattern holds the years
    1970 to 2199 only (29 February of 1900, 2100 or 2023 is no day)."""
    from app.limits import _RFC3339, _TIME_IN_RANGE

    text = f"{day.isoformat()}T{clock.isoformat()}Z"
    assert _RFC3339.fullmatch(text)
    assert (re.fullmatch(_TIME_IN_RANGE, text) is not None) == (1970 <= day.year <= 2199)


@pytest.mark.parametrize("day", ["2023-02-29", "2100-02-29", "1900-02-29", "2023-04-31"])
def test_days_past_a_month_end_match_no_time_pattern(day: str) -> None:
    from app.limits import _RFC3339, _TIME_IN_RANGE

    assert _RFC3339.fullmatch(f"{day}T10:00:00Z") is None
    assert re.fullmatch(_TIME_IN_RANGE, f"{day}T10:00:00Z") is None


@given(
    TEXT
    | st.text(
        st.sampled_from("!?.,;:-_()[]{}\"'/\\ \t\u3000\uff01\u2026\u00bf\u00a1a1"), max_size=8
    )
)
def test_the_procedure_query_pattern_is_the_query_rule(value: str) -> None:
    from app.declared import procedure_query_pattern
    from app.scoring.procedural import normalise_pattern

    accepted = text_problem(value) is None and normalise_pattern(value) != ""
    assert (re.search(procedure_query_pattern(), value) is not None) == accepted
