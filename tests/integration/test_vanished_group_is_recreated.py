"""A consumer group that vanished from a partition (deleted, or lost with a Redis Cluster
master whose replica took over) is recreated wherever the consumer meets its absence, on a
read or on a reclaim, and what the partition holds is stored: reclaims run before reads, so
a reclaim that gave up on the missing group would keep every partition from being read."""

from __future__ import annotations

import redis
from sqlalchemy import select

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.episodic.models import Turn
from app.streams.producer import EventProducer
from tests.integration.helpers import ingest_consumer, turn


def test_a_group_gone_from_one_partition_is_recreated_and_read(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    users = [f"u{n}" for n in range(12)]
    receipts = EventProducer(redis_client, settings).send_many([turn(tenant, u, 1) for u in users])
    assert len({r.stream for r in receipts}) > 1
    consumer = ingest_consumer(redis_client, settings)
    redis_client.xgroup_destroy(receipts[0].stream, settings.consumer_group)

    while consumer.step(block_ms=50):  # the first step reclaims before it reads
        pass
    with unit_of_work(tenant) as session:
        assert sorted(session.scalars(select(Turn.user_id))) == sorted(users)
    assert consumer.stats.transient_errors == 0
