"""`celery worker` alone runs the stream consumers: a pushed turn reaches L1 and L2."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.episodic.models import RawEvent, Turn
from app.layers.working.store import WorkingMemoryStore
from app.streams.producer import EventProducer
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

pytestmark = pytest.mark.slow


def test_pushed_turn_reaches_l1_and_l2_through_a_real_worker(
    settings: Settings, redis_client, tenant: str
) -> None:
    producer = EventProducer(redis_client, settings)
    receipt = producer.send(turn(tenant, "carol", 1, content="Remind me to renew the TLS cert"))
    producer.send({"type": "typing_start", "tenant_id": tenant, "user_id": "carol"})

    def stored() -> list[Turn]:
        with unit_of_work(tenant) as session:
            return list(session.scalars(select(Turn)))

    with celery_worker(settings):
        assert wait_for(lambda: len(stored()) == 1, timeout=60)
        assert wait_for(
            lambda: WorkingMemoryStore(redis_client, settings).read(tenant, "carol") is not None,
            timeout=10,
        )
    rows = stored()
    assert [str(r.id) for r in rows] == [receipt.event_id]
    assert rows[0].content == "Remind me to renew the TLS cert"
    memory = WorkingMemoryStore(redis_client, settings).read(tenant, "carol")
    assert memory is not None
    assert [t.content for t in memory.turns] == ["Remind me to renew the TLS cert"]
    with unit_of_work(tenant) as session:
        assert session.scalars(select(RawEvent.type)).all() == ["typing_start"]
