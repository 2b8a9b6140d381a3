"""Event validation: what parse_event / parse_event_json accept, refuse, and how ids derive."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import Settings
from app.streams.events import (
    EVENT_NAMESPACE,
    EventValidationError,
    GenericEvent,
    ToolRunEvent,
    TurnEvent,
    TypingStartEvent,
    conflicting_duplicate,
    parse_event,
    parse_event_json,
)

identifiers = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,40}", fullmatch=True)
external_ids = st.text(min_size=1, max_size=60).filter(lambda s: "\x00" not in s)


def a_turn(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "turn",
        "tenant_id": "acme",
        "user_id": "u-1",
        "role": "user",
        "content": "Let's move the launch to Thursday.",
        "external_id": "msg-1",
        "timestamp": "2026-01-01T10:00:00+00:00",
    }
    event.update(overrides)
    return event


def a_sensor_reading(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "sensor.reading",
        "tenant_id": "acme",
        "user_id": "u-1",
        "timestamp": "2026-01-01T10:00:00+00:00",
        "payload": {"celsius": 21.5, "room": "kitchen"},
    }
    event.update(overrides)
    return event


def refused_fields(data: Any) -> list[str]:
    with pytest.raises(EventValidationError) as caught:
        parse_event(data)
    return caught.value.fields


# -- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("role", [7, None, ["user"], "admin"])
def test_bad_role_is_refused_and_named(role: object) -> None:
    assert refused_fields(a_turn(role=role)) == ["role"]


@pytest.mark.parametrize("missing", ["content", "external_id", "role", "tenant_id", "user_id"])
def test_missing_turn_field_is_named(missing: str) -> None:
    event = a_turn()
    del event[missing]
    assert missing in refused_fields(event)


def test_missing_type_is_named() -> None:
    event = a_turn()
    del event["type"]
    assert refused_fields(event) == ["type"]


def test_several_bad_fields_are_all_named() -> None:
    fields = refused_fields(a_turn(role="admin", content="", user_id="bad user"))
    assert set(fields) == {"role", "content", "user_id"}


def test_content_at_the_byte_limit_is_accepted(base_settings: Settings) -> None:
    limit = base_settings.max_content_bytes
    event = parse_event(a_turn(content="a" * limit))
    assert isinstance(event, TurnEvent)
    assert len(event.content.encode()) == limit


def test_content_over_the_byte_limit_is_refused(base_settings: Settings) -> None:
    assert refused_fields(a_turn(content="a" * (base_settings.max_content_bytes + 1))) == [
        "content"
    ]


def test_content_limit_counts_utf8_bytes_not_characters(base_settings: Settings) -> None:
    chars = base_settings.max_content_bytes // 2 + 1  # two bytes each: over the byte limit
    assert refused_fields(a_turn(content="é" * chars)) == ["content"]


def test_nul_in_content_is_refused() -> None:
    assert refused_fields(a_turn(content="before\x00after")) == ["content"]


def test_extra_field_is_refused_and_named() -> None:
    assert refused_fields(a_turn(mood="happy")) == ["mood"]


def test_extra_top_level_field_on_unknown_type_is_refused() -> None:
    assert refused_fields(a_sensor_reading(celsius=21.5)) == ["celsius"]


def test_non_object_json_is_refused() -> None:
    with pytest.raises(EventValidationError) as caught:
        parse_event_json("[1, 2, 3]")
    assert caught.value.fields == ["<event>"]


def test_invalid_json_is_refused() -> None:
    with pytest.raises(EventValidationError):
        parse_event_json('{"type": "turn",')


# -- unknown types ----------------------------------------------------------------------------


def test_unknown_well_formed_type_becomes_a_generic_event() -> None:
    event = parse_event(a_sensor_reading())
    assert isinstance(event, GenericEvent)
    assert event.type == "sensor.reading"
    assert event.payload == {"celsius": 21.5, "room": "kitchen"}


@pytest.mark.parametrize("kind", ["Sensor.Reading", "sensor reading", "9lives", "", "x" * 65])
def test_malformed_type_name_is_refused(kind: str) -> None:
    assert "type" in refused_fields(a_sensor_reading(type=kind))


def test_known_type_with_bad_fields_is_not_downgraded_to_generic() -> None:
    assert "status" in refused_fields(
        {"type": "presence_change", "tenant_id": "acme", "user_id": "u-1", "status": "asleep"}
    )


def test_json_round_trip_keeps_the_event() -> None:
    event = parse_event(a_turn())
    again = parse_event_json(event.to_json())
    assert again == event


# -- timestamps ---------------------------------------------------------------------------------


def test_naive_timestamp_string_is_taken_as_utc() -> None:
    event = parse_event(a_turn(timestamp="2026-03-01T12:30:00"))
    assert event.timestamp == datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    assert event.timestamp.utcoffset() == timedelta(0)


def test_naive_datetime_is_taken_as_utc() -> None:
    event = parse_event(a_turn(timestamp=datetime(2026, 3, 1, 12, 30)))
    assert event.timestamp == datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    assert event.timestamp.tzinfo is not None


def test_offset_timestamp_is_converted_to_utc() -> None:
    event = parse_event(a_turn(timestamp="2026-03-01T12:30:00+02:00"))
    assert event.timestamp.utcoffset() == timedelta(0)
    assert event.timestamp.hour == 10


# -- ids ---------------------------------------------------------------------------------------


def test_turn_id_derives_from_tenant_user_and_external_id() -> None:
    event = parse_event(a_turn(tenant_id="acme", user_id="u-1", external_id="msg-1"))
    assert event.id == uuid.uuid5(EVENT_NAMESPACE, "turn\x1facme\x1fu-1\x1fmsg-1")


def test_turn_id_is_stable_across_content_role_and_time_changes() -> None:
    first = parse_event(a_turn())
    edited = parse_event(
        a_turn(content="Actually, Friday.", role="assistant", timestamp="2026-02-02T00:00:00Z")
    )
    assert edited.id == first.id


@pytest.mark.parametrize(
    "change", [{"tenant_id": "other"}, {"user_id": "u-2"}, {"external_id": "msg-2"}]
)
def test_turn_id_changes_with_its_identity(change: dict[str, str]) -> None:
    assert parse_event(a_turn(**change)).id != parse_event(a_turn()).id


def test_a_client_event_id_must_be_the_derived_one() -> None:
    derived = parse_event(a_turn()).id
    assert parse_event(a_turn(event_id=str(derived))).id == derived  # a receipt echoed back
    assert refused_fields(a_turn(event_id=str(uuid.uuid4()))) == ["event_id"]


def test_generic_event_id_is_stable_for_identical_content() -> None:
    assert parse_event(a_sensor_reading()).id == parse_event(a_sensor_reading()).id


def test_generic_event_id_ignores_payload_key_order_and_timestamp_offset() -> None:
    base = parse_event(a_sensor_reading())
    reordered = parse_event(
        a_sensor_reading(
            payload={"room": "kitchen", "celsius": 21.5}, timestamp="2026-01-01T12:00:00+02:00"
        )
    )
    assert reordered.id == base.id


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"celsius": 22.0, "room": "kitchen"}},
        {"timestamp": "2026-01-01T10:00:01+00:00"},
        {"user_id": "u-2"},
        {"type": "sensor.other"},
    ],
)
def test_generic_event_id_changes_with_content(change: dict[str, Any]) -> None:
    assert parse_event(a_sensor_reading(**change)).id != parse_event(a_sensor_reading()).id


def test_external_id_is_the_idempotency_key_of_non_turn_events() -> None:
    def typing(tenant: str, second: int) -> dict[str, Any]:
        return {
            "type": "typing_start",
            "tenant_id": tenant,
            "user_id": "u-1",
            "external_id": "k-1",
            "timestamp": f"2026-01-01T00:00:0{second}Z",
        }

    event = parse_event(typing("acme", 1))
    assert isinstance(event, TypingStartEvent)
    assert parse_event(typing("acme", 2)).id == event.id  # same key, re-sent later
    assert parse_event(typing("other", 1)).id != event.id  # never across tenants


# -- what PostgreSQL cannot store must be refused up front --------------------------------------


@pytest.mark.parametrize("field", ["external_id", "speaker"])
def test_nul_in_other_turn_text_fields_is_refused(field: str) -> None:
    assert refused_fields(a_turn(**{field: "x\x00y"})) == [field]


def test_nul_in_tool_run_output_is_refused() -> None:
    event = {
        "type": "tool_run",
        "tenant_id": "acme",
        "user_id": "u-1",
        "tool": "grep",
        "output": "line\x00",
    }
    assert refused_fields(event) == ["output"]


def test_nul_in_metadata_and_payload_is_refused() -> None:
    assert refused_fields(a_turn(metadata={"k": "a\x00"})) == ["metadata"]
    assert refused_fields(a_sensor_reading(payload={"k": "a\x00"})) == ["payload"]


def test_backslash_u0000_text_without_nul_is_accepted() -> None:
    event = parse_event(a_turn(metadata={"path": r"C:\u0000dir"}))
    assert event.metadata == {"path": r"C:\u0000dir"}


def test_tool_run_is_parsed_as_its_own_type() -> None:
    event = parse_event(
        {"type": "tool_run", "tenant_id": "acme", "user_id": "u-1", "tool": "grep", "success": True}
    )
    assert isinstance(event, ToolRunEvent)
    assert json.loads(event.to_json())["tool"] == "grep"


# -- properties ---------------------------------------------------------------------------------


@given(tenant=identifiers, user=identifiers, external=external_ids, other=external_ids)
def test_turn_id_is_deterministic_and_keyed_on_external_id(
    tenant: str, user: str, external: str, other: str
) -> None:
    first = parse_event(a_turn(tenant_id=tenant, user_id=user, external_id=external))
    again = parse_event(
        a_turn(tenant_id=tenant, user_id=user, external_id=external, content="changed")
    )
    assert first.id == again.id
    different = parse_event(a_turn(tenant_id=tenant, user_id=user, external_id=other))
    assert (different.id == first.id) == (other == external)


def _batch_conflicts(raws: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(later, earlier) for each event of a batch that `conflicting_duplicate` refuses."""
    first_of: dict[uuid.UUID, Any] = {}
    found = []
    for index, raw in enumerate(raws):
        event = parse_event(raw)
        earlier = conflicting_duplicate(first_of, index, event, raw.get("timestamp") is not None)
        if earlier is not None:
            found.append((index, earlier))
    return found


def test_a_resend_within_a_batch_is_no_conflict() -> None:
    same = a_turn(external_id="m-1", metadata={})
    assert _batch_conflicts([same, {**same, "metadata": {}}, a_turn(external_id="m-2")]) == []
    untimed = {k: v for k, v in a_turn(external_id="m-3").items() if k != "timestamp"}
    assert _batch_conflicts([untimed, dict(untimed)]) == []


def test_two_events_under_one_id_are_a_conflict_naming_the_first() -> None:
    first = a_turn(external_id="m-1", content="the first words")
    other = a_turn(external_id="m-1", content="other words")
    assert _batch_conflicts([first, a_turn(external_id="m-2"), other]) == [(2, 0)]
    untimed = {k: v for k, v in first.items() if k != "timestamp"}
    assert _batch_conflicts([first, untimed]) == [(1, 0)]  # which time is the event's?
