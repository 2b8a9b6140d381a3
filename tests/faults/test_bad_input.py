"""Hostile and broken input through the real API process and through the producer: every
request gets an answer below 500 (a 4xx naming the problem, or success), and whatever Engram
accepted is stored — nothing is accepted and then lost in the consumer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import redis

from app.config import Settings
from app.streams.events import EventValidationError
from app.streams.producer import EventProducer
from tests.faults.stack import private_env
from tests.faults.tally import (
    Tally,
    dead_letters,
    pending,
    stored_turns,
    tally,
    turn_counts,
)
from tests.faults.traffic import ApiClient
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

USER = "hostile"
DEEP = 100_000


def _raw_event(tenant: str, name: str, **raw: str) -> str:
    """A turn as JSON text, with `raw` values spliced in unparsed (NaN, escapes, huge numbers)."""
    event = turn(tenant, USER, 0, external_id=f"bad-{name}")
    for key in raw:
        event[key] = f"@@{key}@@"
    text = json.dumps(event)
    for key, value in raw.items():
        text = text.replace(f'"@@{key}@@"', value)
    return text


def _event_bodies(tenant: str) -> dict[str, bytes]:
    """name → a POST /v1/events body; its one event (if any) has external id bad-<name>."""

    def one(name: str, **raw: str) -> bytes:
        return f'{{"events": [{_raw_event(tenant, name, **raw)}]}}'.encode()

    def nested(depth: int) -> str:
        return "[" * depth + "]" * depth

    return {
        "malformed_json": b'{"events": [',
        "invalid_utf8": one("invalid_utf8").replace(b"message", b"m\xff\xfessage"),
        "body_not_an_object": b"[]",
        "events_not_a_list": b'{"events": "many"}',
        "no_events": b'{"events": []}',
        "event_not_an_object": b'{"events": [1]}',
        "missing_fields": b'{"events": [{"type": "turn"}]}',
        "role_is_a_number": one("role_is_a_number", role="42"),
        "nul_in_content": one("nul_in_content", content='"bad \\u0000 byte"'),
        "lone_surrogate": one("lone_surrogate", content='"half \\ud800 a pair"'),
        "year_1": one("year_1", timestamp='"0001-01-01T00:00:00Z"'),
        "year_9999": one("year_9999", timestamp='"9999-12-31T23:59:59Z"'),
        "overflow_to_utc": one("overflow_to_utc", timestamp='"9999-12-31T23:00:00-05:00"'),
        "underflow_to_utc": one("underflow_to_utc", timestamp='"0001-01-01T00:00:00+05:00"'),
        "numeric_timestamp_huge": one("numeric_timestamp_huge", timestamp="1e20"),
        "timestamp_words": one("timestamp_words", timestamp='"yesterday-ish"'),
        "metadata_depth_100000": one("metadata_depth_100000", metadata=f'{{"d": {nested(DEEP)}}}'),
        "metadata_depth_2000": one("metadata_depth_2000", metadata=f'{{"d": {nested(2000)}}}'),
        "metadata_depth_100": one("metadata_depth_100", metadata=f'{{"d": {nested(100)}}}'),
        "metadata_nan": one("metadata_nan", metadata='{"x": NaN}'),
        "metadata_infinity": one("metadata_infinity", metadata='{"x": 1e400}'),
        "metadata_huge_int": one("metadata_huge_int", metadata=f'{{"x": {"9" * 5000}}}'),
        "metadata_not_a_mapping": one("metadata_not_a_mapping", metadata='"text"'),
        "unknown_field": one("unknown_field", colour='"blue"'),
        "event_id_not_derived": one("event_id_not_derived", event_id=f'"{uuid.uuid4()}"'),
        "external_id_too_long": one("external_id_too_long", external_id=f'"{"x" * 300}"'),
        "user_id_with_spaces": one("user_id_with_spaces", user_id='"has spaces"'),
        "channel_control_char": one("channel_control_char", channel='"we\\u0007b"'),
        "content_too_large": one("content_too_large", content=f'"{"x" * 2_000_000}"'),
        "other_tenant": one("other_tenant", tenant_id='"t-someone-else"'),
        "generic_type_bad_name": one("generic_type_bad_name", type='"Not A Type!"'),
        "too_many_events": json.dumps(
            {
                "events": [
                    turn(tenant, USER, n, external_id="bad-too_many_events") for n in range(1001)
                ]
            }
        ).encode(),
        "body_too_large": b'{"events": [' + b" " * (5 * 1024 * 1024) + b"]}",
    }


def _queries() -> list[tuple[str, str, bytes]]:
    """(method, path, body) of bad reads and writes on the other routes."""
    return [
        ("POST", "/v1/search", b'{"user_id": "hostile", "query": "a\\u0000b"}'),
        ("POST", "/v1/search", b'{"user_id": "hostile", "query": "half \\ud800"}'),
        ("POST", "/v1/search", b'{"user_id": "hostile", "query": "x", "limit": 0}'),
        ("POST", "/v1/search", b'{"user_id": "has spaces", "query": "x"}'),
        (
            "POST",
            "/v1/search",
            b'{"user_id": "hostile", "query": "x", "since": "9999-12-31T23:00:00-05:00"}',
        ),
        ("POST", "/v1/search", b'{"user_id": "hostile", "query": "x", "unit": "sideways"}'),
        ("POST", "/v1/search", b'{"user_id": "hostile", "query": "x", "min_importance": NaN}'),
        ("POST", "/v1/search", b"{"),
        ("POST", "/v1/context", b'{"user_id": "hostile", "query": "x", "token_budget": 1e30}'),
        ("POST", "/v1/context", b'{"user_id": "hostile", "query": "half \\ud800"}'),
        (
            "POST",
            "/v1/memories",
            b'{"user_id": "hostile", "memories": [{"content": "a\\u0000b"}]}',
        ),
        (
            "POST",
            "/v1/memories",
            b'{"user_id": "hostile", "memories": [{"content": "ok", "importance": NaN}]}',
        ),
        (
            "POST",
            "/v1/memories",
            b'{"user_id": "hostile", "memories": [{"content": "half \\ud800"}]}',
        ),
        ("GET", "/v1/memories?user_id=hostile&cursor=%FF%FE-not-a-cursor", b""),
        ("GET", "/v1/memories?user_id=hostile&limit=-1", b""),
        ("GET", "/v1/memories/not-a-uuid", b""),
    ]


def _producer_cases(tenant: str) -> dict[str, Any]:
    def nested(depth: int) -> list[Any]:
        value: list[Any] = []
        for _ in range(depth):
            value = [value]
        return value

    def bad(name: str, **change: Any) -> dict[str, Any]:
        return {**turn(tenant, USER, 0, external_id=f"producer-{name}"), **change}

    return {
        "not_a_mapping": ["a", "list"],
        "lone_surrogate": bad("lone_surrogate", content="half \ud800 a pair"),
        "year_1": bad("year_1", timestamp="0001-01-01T00:00:00Z"),
        "year_9999": bad("year_9999", timestamp="9999-12-31T23:59:59Z"),
        "overflow_to_utc": bad("overflow_to_utc", timestamp="9999-12-31T23:00:00-05:00"),
        "metadata_depth_100000": bad("metadata_depth_100000", metadata={"d": nested(DEEP)}),
        "metadata_nan": bad("metadata_nan", metadata={"x": float("nan")}),
        "metadata_set": bad("metadata_set", metadata={"x": {1, 2}}),
        "nul_in_key": bad("nul_in_key", metadata={"a\x00": 1}),
    }


def test_bad_input_through_api_and_producer_gets_no_5xx_and_loses_nothing(
    fault_settings: Settings,
    private_redis: redis.Redis,
    api_client: ApiClient,
    report: Callable[[Tally], None],
) -> None:
    settings = fault_settings
    tenant = api_client.tenant
    refused_by_api: dict[str, int] = {}
    for name, body in _event_bodies(tenant).items():
        status = api_client.call("POST", "/v1/events", raw=body)
        if status == 202:
            api_client.sent.add(f"bad-{name}")
        else:
            refused_by_api[name] = status
    for method, path, body in _queries():
        api_client.call(method, path, raw=body or None)
    assert api_client.send([turn(tenant, USER, 1, external_id="good-api")])

    producer = EventProducer(private_redis, settings)
    refused_with: dict[str, str] = {}
    for name, event in _producer_cases(tenant).items():
        try:
            producer.send(event)
        except EventValidationError:
            refused_with[name] = "EventValidationError"
        except Exception as exc:  # any other exception is the producer failing, not refusing
            refused_with[name] = f"{type(exc).__name__}: {str(exc)[:80]}"
        else:
            api_client.sent.add(event["external_id"])

    with celery_worker(settings, **private_env(settings)):
        wait_for(
            lambda: (
                stored_turns(settings, tenant) >= len(api_client.sent)
                and pending(private_redis, settings) == 0
            ),
            timeout=60,
        )

    result = tally("bad_input", settings, tenant, api_client.sent)
    report(result)
    assert api_client.server_errors() == []
    assert {k: v for k, v in refused_with.items() if v != "EventValidationError"} == {}
    accepted_lost = sorted(api_client.sent - set(turn_counts(settings, tenant)[0]))
    assert result.lost == 0 and result.duplicated == 0, (result, accepted_lost)
    assert dead_letters(private_redis, settings) == [], "an accepted event was dead-lettered"
    assert {"malformed_json", "nul_in_content", "too_many_events"} <= set(refused_by_api)
