"""The periodic jobs do their work through their Celery entry points, against real services."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.episodic.models import Session
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer
from tests.integration.helpers import turn


@pytest.fixture
def task_settings(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Tasks read the process settings; point them at this test's Redis prefix."""
    from app.config import get_settings

    monkeypatch.setitem(os.environ, "ENGRAM_REDIS_PREFIX", settings.redis_prefix)
    get_settings.cache_clear()
    yield get_settings()
    monkeypatch.delitem(os.environ, "ENGRAM_REDIS_PREFIX")
    get_settings.cache_clear()


def test_trim_task_removes_only_acknowledged_entries(
    task_settings: Settings, redis_client, tenant: str
) -> None:
    from tasks.ingest import trim_streams

    producer = EventProducer(redis_client, task_settings)
    producer.send_many([turn(tenant, "u", n) for n in range(3000)])
    consumer = StreamConsumer(
        client=redis_client,
        settings=task_settings,
        handler=IngestService(client=redis_client, settings=task_settings),
        name="c",
    )
    consumer.ensure_groups()
    while consumer.step(block_ms=10):
        pass
    producer.send_many([turn(tenant, "u", n) for n in range(3000, 3010)])  # not yet consumed
    keys = RedisKeys.from_settings(task_settings).partitions(task_settings.stream_partitions)
    before = sum(redis_client.xlen(k) for k in keys)

    removed = trim_streams()

    after = sum(redis_client.xlen(k) for k in keys)
    assert removed > 0 and after == before - removed
    assert after >= 10
    assert consumer.step(block_ms=10) == 10  # the unconsumed entries are all still there


def test_close_idle_sessions_task_closes_only_idle_ones(
    task_settings: Settings, redis_client, tenant: str
) -> None:
    from tasks.maintenance import close_idle_sessions

    now = datetime.now(UTC)
    service = IngestService(client=redis_client, settings=task_settings)
    producer = EventProducer(redis_client, task_settings)
    old = (now - timedelta(hours=3)).isoformat()
    producer.send(turn(tenant, "sleepy", 1, timestamp=old))
    producer.send(turn(tenant, "awake", 2, timestamp=now.isoformat()))
    consumer = StreamConsumer(
        client=redis_client, settings=task_settings, handler=service, name="c"
    )
    consumer.ensure_groups()
    while consumer.step(block_ms=10):
        pass

    assert close_idle_sessions() >= 1

    with unit_of_work(tenant) as session:
        closed = dict(session.execute(select(Session.user_id, Session.closed_at)).all())
    assert closed["sleepy"] is not None
    assert closed["awake"] is None
