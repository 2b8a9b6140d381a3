"""A poison entry goes to the dead-letter stream after N tries; everything else still flows."""

from __future__ import annotations

import json
import time

from sqlalchemy import func, select

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys, partition_of
from app.layers.episodic.models import Turn
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer
from tests.integration.helpers import turn


def test_poison_is_dead_lettered_after_max_deliveries_while_the_rest_flows(
    settings: Settings, redis_client, tenant: str
) -> None:
    keys = RedisKeys.from_settings(settings)
    producer = EventProducer(redis_client, settings)
    producer.send_many([turn(tenant, "u1", n) for n in range(10)])
    # A producer that bypasses validation: Postgres refuses NUL characters in text.
    poison = turn(tenant, "u1", 99, content="bad \u0000 byte")
    stream = keys.partition(partition_of(tenant, "u1", settings.stream_partitions))
    redis_client.xadd(stream, {"event": json.dumps(poison)})
    producer.send_many([turn(tenant, "u1", n) for n in range(10, 20)])

    service = IngestService(client=redis_client, settings=settings)
    consumer = StreamConsumer(client=redis_client, settings=settings, handler=service, name="c1")
    consumer.ensure_groups()
    deadline = time.monotonic() + 30
    while redis_client.xlen(keys.dead_letters()) == 0 and time.monotonic() < deadline:
        consumer.step(block_ms=20)
        time.sleep(0.05)

    dead = redis_client.xrange(keys.dead_letters())
    assert len(dead) == 1
    fields = {k.decode(): v.decode() for k, v in dead[0][1].items()}
    assert int(fields["deliveries"]) == settings.max_deliveries
    assert "NUL" in fields["error"] or "0x00" in fields["error"]
    assert json.loads(fields["field:event"])["external_id"] == "m-99"
    assert consumer.stats.entry_failures == settings.max_deliveries

    with unit_of_work(tenant) as session:
        assert session.scalar(select(func.count()).select_from(Turn)) == 20
    pending = redis_client.xpending(stream, settings.consumer_group)
    assert pending["pending"] == 0


def test_entry_that_keeps_killing_consumers_is_dead_lettered(
    settings: Settings, redis_client, tenant: str
) -> None:
    """Crashes leave no failure record; Redis' delivery counter still stops the loop."""
    keys = RedisKeys.from_settings(settings)
    producer = EventProducer(redis_client, settings)
    producer.send(turn(tenant, "u2", 1))
    stream = keys.partition(partition_of(tenant, "u2", settings.stream_partitions))

    def crash(entries):  # type: ignore[no-untyped-def]
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
