"""The consumer group stays clean and fair: a dead consumer leaves it once its entries were
reclaimed, and a live consumer's slow batch is never taken from it."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from sqlalchemy import func, select

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys, partition_of
from app.layers.episodic.models import Turn
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer, StreamEntry
from app.streams.producer import EventProducer
from tests.integration.helpers import turn, wait_for


def _names(client, stream: str, group: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {
        c["name"].decode() if isinstance(c["name"], bytes) else c["name"]
        for c in client.xinfo_consumers(stream, group)
    }


def _consumer(settings: Settings, client, name: str, handler=None) -> StreamConsumer:  # type: ignore[no-untyped-def]
    handler = handler or IngestService(client=client, settings=settings)
    consumer = StreamConsumer(client=client, settings=settings, handler=handler, name=name)
    consumer.ensure_groups()
    return consumer


def _stored(tenant: str) -> int:
    with unit_of_work(tenant) as session:
        return int(session.scalar(select(func.count()).select_from(Turn)) or 0)


def _idle(settings: Settings) -> None:
    """Let held entries (and silent consumers) pass the claim time."""
    time.sleep(settings.claim_min_idle_ms / 1000 * 1.5)


def test_dead_consumer_is_removed_once_its_entries_were_reclaimed(
    settings: Settings, redis_client, tenant: str
) -> None:
    EventProducer(redis_client, settings).send_many([turn(tenant, "u", n) for n in range(5)])
    stream = RedisKeys.from_settings(settings).partition(
        partition_of(tenant, "u", settings.stream_partitions)
    )
    group = settings.consumer_group
    dead = _consumer(settings, redis_client, "dead")
    assert len(dead.read(block_ms=20)) == 5  # read, then never heard of again
    survivor = _consumer(settings, redis_client, "survivor")
    _idle(settings)

    # However long it has been silent, a consumer holding entries is never removed.
    assert survivor.upkeep.remove(stream, ["dead"]) == []
    assert survivor.remove_dead_consumers(stream) == []
    assert "dead" in _names(redis_client, stream, group)

    assert survivor.reclaim() == 5

    assert _stored(tenant) == 5
    assert _names(redis_client, stream, group) == {"survivor"}
    assert survivor.stats.consumers_removed >= 1
    assert redis_client.xpending(stream, group)["pending"] == 0


def test_a_live_consumer_idle_on_a_quiet_partition_stays(
    settings: Settings, redis_client, tenant: str
) -> None:
    """Reads that find nothing do not refresh a consumer's idle time on a partition; its
    heartbeat says it is alive, so it is not churned out of the group."""
    EventProducer(redis_client, settings).send(turn(tenant, "u", 1))
    stream = RedisKeys.from_settings(settings).partition(
        partition_of(tenant, "u", settings.stream_partitions)
    )
    live = _consumer(settings, redis_client, "live")
    assert live.step(block_ms=20) == 1
    live.heartbeat()
    sweeper = _consumer(settings, redis_client, "sweeper")
    _idle(settings)
    assert live.step(block_ms=20) == 0  # reads, finds nothing: still idle on that partition

    assert "live" in sweeper.upkeep.idle_consumers(stream, idle_ms=settings.claim_min_idle_ms)
    assert sweeper.remove_dead_consumers(stream) == []
    assert "live" in _names(redis_client, stream, settings.consumer_group)


def test_a_live_slow_batch_is_touched_not_stolen(
    settings: Settings, redis_client, tenant: str
) -> None:
    """The slow consumer holds its batch for several claim times; another consumer reclaiming
    all along takes nothing, and Redis counts a single delivery."""
    EventProducer(redis_client, settings).send_many([turn(tenant, "u", n) for n in range(8)])
    stream = RedisKeys.from_settings(settings).partition(
        partition_of(tenant, "u", settings.stream_partitions)
    )
    inside, release = threading.Event(), threading.Event()
    service = IngestService(client=redis_client, settings=settings)

    def slow(entries: Sequence[StreamEntry]) -> None:
        inside.set()
        assert release.wait(30)
        service(entries)

    slow_consumer = _consumer(settings, redis_client, "slow", slow)
    thief = _consumer(settings, redis_client, "thief")
    acked: list[int] = []
    worker = threading.Thread(target=lambda: acked.append(slow_consumer.step(block_ms=20)))
    worker.start()
    try:
        assert inside.wait(30)
        for _ in range(4):
            _idle(settings)
            assert thief.reclaim() == 0
    finally:
        release.set()
        worker.join(30)

    assert acked == [8] and thief.stats.reclaimed == 0
    assert _stored(tenant) == 8
    assert redis_client.xpending(stream, settings.consumer_group)["pending"] == 0


def test_touch_never_takes_back_an_entry_another_consumer_reclaimed(
    settings: Settings, redis_client, tenant: str
) -> None:
    EventProducer(redis_client, settings).send(turn(tenant, "u", 1))
    first = _consumer(settings, redis_client, "first")
    [entry] = first.read(block_ms=20)
    group = settings.consumer_group
    redis_client.xclaim(entry.stream, group, "second", 0, [entry.entry_id], justid=True)

    assert first.upkeep.touch(entry.stream, "first", [entry.entry_id]) == 0
    assert first.upkeep.touch(entry.stream, "second", [entry.entry_id]) == 1

    [row] = redis_client.xpending_range(entry.stream, group, min="-", max="+", count=10)
    assert row["consumer"] == b"second" and row["times_delivered"] == 1


def test_a_consumer_that_stops_cleanly_leaves_the_group(
    settings: Settings, redis_client, tenant: str
) -> None:
    EventProducer(redis_client, settings).send_many([turn(tenant, "u", n) for n in range(3)])
    consumer = _consumer(settings, redis_client, "leaving")
    stream = consumer.keys.partition(partition_of(tenant, "u", settings.stream_partitions))
    stop = threading.Event()
    runner = threading.Thread(target=consumer.run, args=(stop,))
    runner.start()
    try:
        assert wait_for(lambda: _stored(tenant) == 3, timeout=30)
        assert wait_for(lambda: "leaving" in _names(redis_client, stream, consumer.group), 30)
    finally:
        stop.set()
        runner.join(30)

    assert "leaving" not in _names(redis_client, stream, consumer.group)
    heartbeat = RedisKeys.from_settings(settings).consumer_heartbeat("leaving")
    assert not redis_client.exists(heartbeat)
