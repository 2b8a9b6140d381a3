"""Events the workers could not store are refused at the door (app/limits.py): timestamps
out of range, JSON nested too deep, fields over their caps, text no store can keep, and
identifiers with anything after them. Whatever is accepted reads back the same from its JSON,
as the consumer will read it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import Settings, get_settings
from app.limits import MAX_JSON_DEPTH, TIMESTAMP_MAX, TIMESTAMP_MIN
from app.streams.events import (
    EventValidationError,
    TurnEvent,
    is_identifier,
    parse_event,
    parse_event_json,
)
from tests.unit.test_event_validation import a_sensor_reading, a_turn, refused_fields

# -- timestamps, depth, caps --------------------------------


def nested(depth: int) -> dict[str, Any]:
    """An object nested exactly `depth` levels (the object itself is level 1)."""
    value: Any = "leaf"
    for level in range(depth - 1):
        value = [value] if level % 2 else {"n": value}
    return {"top": value}


@pytest.mark.parametrize(
    "timestamp",
    [
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:00:00+05:00",  # before year 1 once in UTC
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59-05:00",  # after year 9999 once in UTC
        "1969-12-31T23:59:59.999999Z",
        "2200-01-01T00:00:00.000001Z",
        "2199-12-31T23:30:00-05:00",
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
    ],
)
def test_timestamps_outside_the_range_are_refused(timestamp: object) -> None:
    with pytest.raises(EventValidationError, match="between 1970-01-01T00:00:00Z") as caught:
        parse_event(a_turn(timestamp=timestamp))
    assert caught.value.fields == ["timestamp"]


@pytest.mark.parametrize(
    ("timestamp", "utc"),
    [
        ("1970-01-01T00:00:00Z", TIMESTAMP_MIN),
        ("1970-01-01T05:00:00+05:00", TIMESTAMP_MIN),
        ("2200-01-01T00:00:00Z", TIMESTAMP_MAX),
        ("2199-12-31T19:00:00-05:00", TIMESTAMP_MAX),
    ],
)
def test_the_range_ends_are_accepted(timestamp: str, utc: datetime) -> None:
    assert parse_event(a_turn(timestamp=timestamp)).timestamp == utc


@pytest.mark.parametrize("depth", [1, 2, MAX_JSON_DEPTH])
def test_metadata_up_to_the_depth_limit_is_accepted(depth: int) -> None:
    assert parse_event(a_turn(metadata=nested(depth))).metadata == nested(depth)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 600, 950, 5000])
def test_metadata_nested_past_the_limit_is_refused(depth: int) -> None:
    with pytest.raises(EventValidationError, match="nested deeper than 32") as caught:
        parse_event(a_turn(metadata=nested(depth)))
    assert caught.value.fields == ["metadata"]


def test_every_free_form_json_field_has_the_depth_limit() -> None:
    tool = {"type": "tool_run", "tenant_id": "acme", "user_id": "u-1", "tool": "grep"}
    assert refused_fields({**tool, "arguments": nested(40)}) == ["arguments"]
    assert refused_fields(a_sensor_reading(payload=nested(40))) == ["payload"]


def test_a_cyclic_value_is_refused_not_walked_forever() -> None:
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    assert refused_fields(a_turn(metadata=cycle)) == ["metadata"]


def test_every_free_form_field_has_a_size_cap(base_settings: Settings) -> None:
    big = "x" * (base_settings.max_content_bytes + 1)
    tool = {"type": "tool_run", "tenant_id": "acme", "user_id": "u-1", "tool": "grep"}
    assert refused_fields({**tool, "arguments": {"blob": big}}) == ["arguments"]
    assert refused_fields({**tool, "output": big}) == ["output"]
    iot = {"type": "iot_trigger", "tenant_id": "acme", "user_id": "u-1", "device_id": "d"}
    iot["trigger"] = "t"
    assert refused_fields({**iot, "value": "v" * 3_000_000}) == ["value"]
    assert refused_fields(a_sensor_reading(payload={"blob": big})) == ["payload"]
    meta = "m" * base_settings.max_metadata_bytes
    assert refused_fields(a_turn(metadata={"blob": meta})) == ["metadata"]


@pytest.fixture
def small_events(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process settings with a whole-event cap of 4 KiB (validation reads them)."""
    monkeypatch.setenv("ENGRAM_MAX_EVENT_BYTES", "4096")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.mark.usefixtures("small_events")
def test_the_whole_serialized_event_has_a_size_cap() -> None:
    # Control characters are written six bytes each (\u0001): content under its own cap
    # still makes an event over a whole-event cap set this low.
    assert refused_fields(a_turn(content="\x01" * 1000)) == ["<event>"]
    assert isinstance(parse_event(a_turn(content="a" * 1000)), TurnEvent)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("user_id", "u9\n"),
        ("tenant_id", "acme\n"),
        ("user_id", "\nu9"),
        ("user_id", "u\r"),
        ("type", "sensor.reading\n"),
    ],
)
def test_identifiers_are_matched_whole(field: str, value: str) -> None:
    assert refused_fields(a_sensor_reading(**{field: value})) == [field]


def test_is_identifier_refuses_a_trailing_newline() -> None:
    assert is_identifier("u9") and not is_identifier("u9\n")
    assert not is_identifier(None) and not is_identifier("a" * 129)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"content": "lone \ud800 surrogate"}, "content"),
        ({"speaker": "\udfff"}, "speaker"),
        ({"metadata": {"k": "\ud800"}}, "metadata"),
        ({"metadata": {"\ud800": 1}}, "metadata"),
        ({"metadata": {"k": float("nan")}}, "metadata"),
        ({"metadata": {"k": float("inf")}}, "metadata"),
        ({"metadata": {"k": {1: "int key"}}}, "metadata"),
        ({"metadata": {"k": object()}}, "metadata"),
        ({"metadata": {"k": {"x"}}}, "metadata"),
        ({"metadata": {"k": 10**5000}}, "metadata"),
    ],
)
def test_values_no_store_could_keep_are_refused(change: dict[str, Any], field: str) -> None:
    assert refused_fields(a_turn(**change)) == [field]


def test_non_finite_numbers_are_refused_in_every_number_field() -> None:
    tool = {"type": "tool_run", "tenant_id": "acme", "user_id": "u-1", "tool": "grep"}
    assert refused_fields({**tool, "duration_ms": float("inf")}) == ["duration_ms"]
    iot = {"type": "iot_trigger", "tenant_id": "acme", "user_id": "u-1", "device_id": "d"}
    assert refused_fields({**iot, "trigger": "t", "value": float("nan")}) == ["value"]


def test_a_union_field_is_named_once_without_its_member_types() -> None:
    iot = {"type": "iot_trigger", "tenant_id": "acme", "user_id": "u-1", "device_id": "d"}
    with pytest.raises(EventValidationError) as caught:
        parse_event({**iot, "trigger": "t", "value": [1, 2]})
    assert caught.value.fields == ["value"]


# -- the door's promise: what is accepted round-trips through the stream unchanged ------------

JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)
ANY_TIME = st.datetimes(
    min_value=datetime(1, 1, 1),
    timezones=st.one_of(
        st.none(), st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m)))
    ),
)


@given(
    timestamp=ANY_TIME,
    metadata=st.dictionaries(st.text(max_size=8), JSON, max_size=4),
    value=st.one_of(st.floats(), st.text(max_size=30), st.booleans(), st.none()),
    kind=st.sampled_from(["turn", "iot_trigger", "sensor.reading"]),
)
def test_an_accepted_event_reads_back_the_same_from_its_json(
    timestamp: datetime, metadata: dict[str, Any], value: object, kind: str
) -> None:
    """Whatever passes is what the consumer will parse: same event, same id, in range."""
    data: dict[str, Any] = {
        "turn": a_turn(),
        "iot_trigger": {
            "type": "iot_trigger",
            "tenant_id": "acme",
            "user_id": "u-1",
            "device_id": "d",
            "trigger": "t",
            "value": value,
        },
        "sensor.reading": a_sensor_reading(payload={"v": metadata}),
    }[kind]
    data.update(timestamp=timestamp, metadata=metadata)
    try:
        event = parse_event(data)
    except EventValidationError as exc:
        assert exc.fields
        return
    assert TIMESTAMP_MIN <= event.timestamp <= TIMESTAMP_MAX
    again = parse_event_json(event.to_json())
    assert again.id == event.id
    assert again.model_dump(mode="json") == event.model_dump(mode="json")
