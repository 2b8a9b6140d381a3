"""Producers reject bad events with the field named, and write nothing for a bad batch."""

from __future__ import annotations

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
