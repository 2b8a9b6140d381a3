"""A poison entry reaches the dead-letter stream whole, with its error; everything else flows.

Undecodable or invalid entries go at once (every delivery would fail alike), wherever they
are met: a fresh read or a reclaim of a dead consumer's entries. Failures we cannot classify
get `max_deliveries` tries. Either way the rest of the partition is stored and acked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from sqlalchemy import func, select, text

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys, partition_of
from app.layers.episodic.models import Turn
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer, StreamEntry
from app.streams.producer import EventProducer
from tests.integration.helpers import turn

REFUSED = "the database refuses this turn"


class RefusedByDatabase:
    """Ingests like the service, except that a batch holding the marked turn runs a statement
    Postgres refuses (a real DataError from the real database, which no validation catches)."""

    def __init__(self, service: IngestService, tenant: str) -> None:
        self.service = service
        self.tenant = tenant
        self.calls = 0

    def __call__(self, entries: Sequence[StreamEntry]) -> None:
        self.calls += 1
        if any(REFUSED in e.fields.get("event", "") for e in entries):
            with unit_of_work(self.tenant) as session:
                session.execute(text("SELECT 1 / 0"))
        self.service(entries)


def _stored(tenant: str) -> int:
    with unit_of_work(tenant) as session:
        return int(session.scalar(select(func.count()).select_from(Turn)) or 0)


def _raw_dead_letters(client: redis.Redis, key: str) -> list[list[tuple[bytes, bytes]]]:
    """Dead letters as stored (a second client object, so XRANGE keeps repeated fields)."""
    raw = redis.Redis(connection_pool=client.connection_pool)
    raw.set_response_callback("XRANGE", lambda response, **_: response)
    rows = raw.execute_command("XRANGE", key, "-", "+")
    return [list(zip(flat[::2], flat[1::2], strict=True)) for _, flat in rows]


def _meta(letter: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in letter if not k.startswith(b"field:")}


def _payload(letter: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k[len(b"field:") :], v) for k, v in letter if k.startswith(b"field:")]


def test_value_the_database_refuses_is_dead_lettered_after_max_deliveries(
    settings: Settings, redis_client, tenant: str
) -> None:
    keys = RedisKeys.from_settings(settings)
    producer = EventProducer(redis_client, settings)
    producer.send_many([turn(tenant, "u1", n) for n in range(10)])
    producer.send(turn(tenant, "u1", 99, content=REFUSED))
    producer.send_many([turn(tenant, "u1", n) for n in range(10, 20)])
    stream = keys.partition(partition_of(tenant, "u1", settings.stream_partitions))

    handler = RefusedByDatabase(IngestService(client=redis_client, settings=settings), tenant)
    consumer = StreamConsumer(client=redis_client, settings=settings, handler=handler, name="c1")
    consumer.ensure_groups()
    consumer.step(block_ms=20)
    assert _stored(tenant) == 20  # the first pass already stored everything else
    deadline = time.monotonic() + 30
    while redis_client.xlen(keys.dead_letters()) == 0 and time.monotonic() < deadline:
        consumer.step(block_ms=20)
        time.sleep(0.05)

    [letter] = _raw_dead_letters(redis_client, keys.dead_letters())
    meta = _meta(letter)
    assert int(meta["deliveries"]) == settings.max_deliveries
    assert "DataError" in meta["error"] and "division by zero" in meta["error"]
    payload = dict(_payload(letter))
    assert json.loads(payload[b"event"])["external_id"] == "m-99"
    assert consumer.stats.entry_failures == settings.max_deliveries
    assert _stored(tenant) == 20
    assert redis_client.xpending(stream, settings.consumer_group)["pending"] == 0


def _valid(tenant: str, n: int) -> list[bytes]:
    return [b"event", json.dumps(turn(tenant, "u1", n)).encode()]


POISON: dict[str, tuple[list[bytes], str]] = {
    "value not UTF-8": ([b"event", b'{"type": "turn", "content": "\xff\xfe"}'], "not UTF-8"),
    "field name not UTF-8": ([b"ev\xc3\x28nt", b"{}"], "not UTF-8"),
    "field repeated": ([b"event", b"{}", b"event", b"{}"], "repeated"),
    "no event field": ([b"payload", b"{}"], "no 'event' field"),
    "not JSON": ([b"event", b"{'type': 'turn'"], "not JSON"),
    "fails validation": ([b"event", b'{"type": "turn", "tenant_id": "t"}'], "invalid event"),
}


@pytest.mark.parametrize("kind", sorted(POISON))
def test_poison_is_dead_lettered_at_once_with_its_raw_bytes(
    settings: Settings, redis_client, tenant: str, kind: str
) -> None:
    """One read holds valid entries around the poison: they are stored and acked in the same
    pass, and the poison's bytes come out of the dead letter exactly as they went in."""
    poison, error = POISON[kind]
    keys = RedisKeys.from_settings(settings)
    stream = keys.partition(partition_of(tenant, "u1", settings.stream_partitions))
    for n in range(5):
        redis_client.execute_command("XADD", stream, "*", *_valid(tenant, n))
    poison_id = redis_client.execute_command("XADD", stream, "*", *poison).decode()
    for n in range(6, 10):
        redis_client.execute_command("XADD", stream, "*", *_valid(tenant, n))

    handler = IngestService(client=redis_client, settings=settings)
    consumer = StreamConsumer(client=redis_client, settings=settings, handler=handler, name="c")
    consumer.ensure_groups()

    assert consumer.step(block_ms=20) == 9

    assert _stored(tenant) == 9
    [letter] = _raw_dead_letters(redis_client, keys.dead_letters())
    meta = _meta(letter)
    assert meta["entry_id"] == poison_id and meta["stream"] == stream
    assert int(meta["deliveries"]) == 1
    assert error in meta["error"]
    assert _payload(letter) == list(zip(poison[::2], poison[1::2], strict=True))
    assert redis_client.xpending(stream, settings.consumer_group)["pending"] == 0
    assert consumer.stats.dead_lettered == 1


def test_poison_left_pending_by_a_dead_consumer_does_not_hold_back_its_partition(
    settings: Settings, redis_client, tenant: str
) -> None:
    """The fault seen in production: a consumer read an undecodable entry and a valid one,
    then died. Whoever reclaims them dead-letters the first and stores the second, once."""
    keys = RedisKeys.from_settings(settings)
    stream = keys.partition(partition_of(tenant, "u1", settings.stream_partitions))
    redis_client.execute_command("XADD", stream, "*", b"event", b"\x80 not utf-8")
    redis_client.execute_command("XADD", stream, "*", *_valid(tenant, 1))
    redis_client.xgroup_create(stream, settings.consumer_group, id="0", mkstream=True)
    redis_client.xreadgroup(settings.consumer_group, "died", {stream: ">"}, count=10)

    handler = IngestService(client=redis_client, settings=settings)
    survivor = StreamConsumer(
        client=redis_client, settings=settings, handler=handler, name="survivor"
    )
    survivor.ensure_groups()
    time.sleep(settings.claim_min_idle_ms / 1000 + 0.05)

    assert survivor.reclaim() == 1

    assert _stored(tenant) == 1
    assert redis_client.xlen(keys.dead_letters()) == 1
    assert redis_client.xpending(stream, settings.consumer_group)["pending"] == 0
    assert survivor.reclaim() == 0 and survivor.stats.reclaimed == 2


def test_a_client_that_decodes_responses_still_reads_undecodable_entries(
    settings: Settings, redis_client, tenant: str
) -> None:
    """redis-py's decode_responses would raise inside XREADGROUP; the consumer reads raw."""
    keys = RedisKeys.from_settings(settings)
    stream = keys.partition(partition_of(tenant, "u1", settings.stream_partitions))
    redis_client.execute_command("XADD", stream, "*", *_valid(tenant, 1))
    redis_client.execute_command("XADD", stream, "*", b"event", b"\xc0\xaf")
    decoding = redis.Redis(
        connection_pool=redis.ConnectionPool(
            **{**redis_client.connection_pool.connection_kwargs, "decode_responses": True}
        )
    )
    handler = IngestService(client=decoding, settings=settings)
    consumer = StreamConsumer(client=decoding, settings=settings, handler=handler, name="c")
    consumer.ensure_groups()

    assert consumer.step(block_ms=20) == 1

    assert _stored(tenant) == 1
    [letter] = _raw_dead_letters(redis_client, keys.dead_letters())
    assert _payload(letter) == [(b"event", b"\xc0\xaf")]
    decoding.close()


def test_one_poison_in_a_large_batch_costs_a_few_handler_calls(
    settings: Settings, redis_client, tenant: str
) -> None:
    """The failing batch is halved, not replayed entry by entry: the good entries commit in
    a handful of transactions."""
    producer = EventProducer(redis_client, settings)
    events = [turn(tenant, "u1", n) for n in range(256)]
    events[77] = turn(tenant, "u1", 77, content=REFUSED)
    producer.send_many(events)
    handler = RefusedByDatabase(IngestService(client=redis_client, settings=settings), tenant)
    consumer = StreamConsumer(client=redis_client, settings=settings, handler=handler, name="c")
    consumer.ensure_groups()

    assert consumer.step(block_ms=20) == 255

    assert _stored(tenant) == 255
    assert handler.calls <= 2 * 8 + 1  # two calls per halving of 256, plus the first
    assert consumer.stats.entry_failures == 1


def test_entry_that_keeps_killing_consumers_is_dead_lettered(
    settings: Settings, redis_client, tenant: str
) -> None:
    """Crashes leave no failure record; Redis' delivery counter still stops the loop."""
    keys = RedisKeys.from_settings(settings)
    producer = EventProducer(redis_client, settings)
    producer.send(turn(tenant, "u2", 1))
    stream = keys.partition(partition_of(tenant, "u2", settings.stream_partitions))

    def crash(entries: Any) -> None:
        raise SystemExit("worker died")  # not an Exception: nothing is recorded, nothing acked

    for attempt in range(settings.max_deliveries):
        dying = StreamConsumer(
            client=redis_client, settings=settings, handler=crash, name=f"dying-{attempt}"
        )
        dying.ensure_groups()
        try:
            if attempt == 0:
                dying.step(block_ms=20)
            else:
                time.sleep(settings.claim_min_idle_ms / 1000 + 0.05)
                dying.reclaim()
        except SystemExit:
            pass

    time.sleep(settings.claim_min_idle_ms / 1000 + 0.05)
    survivor = StreamConsumer(
        client=redis_client,
        settings=settings,
        handler=IngestService(client=redis_client, settings=settings),
        name="survivor",
    )
    survivor.reclaim()
    dead = redis_client.xrange(keys.dead_letters())
    assert len(dead) == 1
    assert b"delivered" in dead[0][1][b"error"]
    assert redis_client.xpending(stream, settings.consumer_group)["pending"] == 0
