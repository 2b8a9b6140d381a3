"""Producers reject bad events with the field named, and write nothing for a bad batch."""

from __future__ import annotations

import json

import pytest

from app.config import Settings
from app.keys import RedisKeys
from app.streams.events import EventValidationError
from app.streams.producer import EventProducer, StreamFullError
from tests.integration.helpers import turn


def _total_length(client, settings: Settings) -> int:  # type: ignore[no-untyped-def]
    keys = RedisKeys.from_settings(settings).partitions(settings.stream_partitions)
    return sum(client.xlen(k) for k in keys)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"role": 42}, "role"),
        ({"content": None}, "content"),
        ({"timestamp": "yesterday-ish"}, "timestamp"),
        ({"tenant_id": "has spaces"}, "tenant_id"),
        ({"metadata": "not a mapping"}, "metadata"),
    ],
)
def test_bad_field_is_named_and_nothing_is_written(
    settings: Settings, redis_client, tenant: str, change: dict, field: str
) -> None:
    producer = EventProducer(redis_client, settings)
    good = turn(tenant, "u1", 1)
    bad = {**turn(tenant, "u1", 2), **change}
    with pytest.raises(EventValidationError) as caught:
        producer.send_many([good, bad])
    assert field in caught.value.fields
    assert field in str(caught.value)
    assert _total_length(redis_client, settings) == 0


def test_missing_field_and_oversized_content(settings: Settings, redis_client, tenant: str) -> None:
    producer = EventProducer(redis_client, settings)
    missing = turn(tenant, "u1", 1)
    del missing["external_id"]
    with pytest.raises(EventValidationError) as caught:
        producer.send(missing)
    assert caught.value.fields == ["external_id"]
    huge = turn(tenant, "u1", 2, content="x" * (settings.max_content_bytes + 1))
    with pytest.raises(EventValidationError, match="larger than"):
        producer.send(huge)
    assert _total_length(redis_client, settings) == 0


def test_a_user_always_lands_on_the_same_partition(
    settings: Settings, redis_client, tenant: str
) -> None:
    producer = EventProducer(redis_client, settings)
    receipts = producer.send_many([turn(tenant, "same-user", n) for n in range(20)])
    assert len({r.stream for r in receipts}) == 1
    assert len({r.event_id for r in receipts}) == 20


def test_full_partition_refuses_instead_of_dropping(
    settings: Settings, redis_client, tenant: str
) -> None:
    capped = settings.model_copy(update={"stream_max_len": 1000, "stream_partitions": 1})
    producer = EventProducer(redis_client, capped)
    producer.send_many([turn(tenant, "u", n) for n in range(1000)])
    with pytest.raises(StreamFullError) as caught:
        producer.send_many([turn(tenant, "u", n) for n in range(1000, 1005)])
    assert len(caught.value.unsent) == 5
    stream = RedisKeys.from_settings(capped).partition(0)
    assert redis_client.xlen(stream) == 1000
    first = redis_client.xrange(stream, count=1)[0]
    assert b'"external_id":"m-0"' in first[1][b"event"]


@pytest.mark.parametrize(
    ("events", "field"),
    [
        ([["type", "turn"]], "<event>"),
        (["turn"], "<event>"),
        ([5], "<event>"),
        ([None], "<event>"),
        ("turn", "<events>"),
        (None, "<events>"),
        (5, "<events>"),
        ({"type": "turn"}, "<events>"),
    ],
)
def test_wrong_shapes_are_validation_errors(
    settings: Settings, redis_client, events: object, field: str
) -> None:
    producer = EventProducer(redis_client, settings)
    with pytest.raises(EventValidationError) as caught:
        producer.send_many(events)  # type: ignore[arg-type]
    assert caught.value.fields == [field]
    assert _total_length(redis_client, settings) == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"timestamp": "0001-01-01T00:00:00+05:00"}, "timestamp"),
        ({"timestamp": "0001-01-01T00:00:00Z"}, "timestamp"),
        ({"timestamp": "9999-12-31T23:59:59Z"}, "timestamp"),
        ({"metadata": {"deep": json.loads("[" * 40 + "]" * 40)}}, "metadata"),
        ({"user_id": "u9\n"}, "user_id"),
        ({"content": "\ud800"}, "content"),
    ],
)
def test_what_a_worker_could_not_store_is_refused_at_the_door(
    settings: Settings, redis_client, tenant: str, change: dict, field: str
) -> None:
    producer = EventProducer(redis_client, settings)
    with pytest.raises(EventValidationError) as caught:
        producer.send({**turn(tenant, "u1", 1), **change})
    assert caught.value.fields == [field]
    assert _total_length(redis_client, settings) == 0


def test_ten_megabytes_of_arguments_are_refused(
    settings: Settings, redis_client, tenant: str
) -> None:
    producer = EventProducer(redis_client, settings)
    tool = {"type": "tool_run", "tenant_id": tenant, "user_id": "u1", "tool": "grep"}
    with pytest.raises(EventValidationError) as caught:
        producer.send({**tool, "arguments": {"blob": "x" * 10_000_000}})
    assert caught.value.fields == ["arguments"]
    iot = {"type": "iot_trigger", "tenant_id": tenant, "user_id": "u1", "device_id": "d"}
    with pytest.raises(EventValidationError) as caught:
        producer.send({**iot, "trigger": "t", "value": "v" * 10_000_000})
    assert caught.value.fields == ["value"]
    assert _total_length(redis_client, settings) == 0


def test_the_bad_event_of_a_batch_is_pointed_at(
    settings: Settings, redis_client, tenant: str
) -> None:
    producer = EventProducer(redis_client, settings)
    with pytest.raises(EventValidationError, match=r"events\[1\]"):
        producer.send_many([turn(tenant, "u1", 1), {**turn(tenant, "u1", 2), "role": 7}])
