"""A pushed turn reaches L1 and L2 exactly once, however often it is sent or delivered."""

from __future__ import annotations

from sqlalchemy import func, select

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.episodic.models import Session, Turn
from app.layers.working.store import WorkingMemoryStore
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer
from tests.integration.helpers import turn


def _drain(consumer: StreamConsumer, expected: int, max_steps: int = 200) -> int:
    done = 0
    for _ in range(max_steps):
        done += consumer.step(block_ms=20)
        if done >= expected:
            break
    return done


def _turn_rows(tenant: str, user: str) -> list[Turn]:
    with unit_of_work(tenant) as session:
        return list(session.scalars(select(Turn).where(Turn.user_id == user)))


def test_same_event_sent_twice_is_stored_once(
    settings: Settings, redis_client, tenant: str
) -> None:
    producer = EventProducer(redis_client, settings)
    event = turn(tenant, "alice", 1, content="I prefer window seats on long flights")
    first = producer.send(event)
    second = producer.send(event)
    assert first.event_id == second.event_id and first.entry_id != second.entry_id

    service = IngestService(client=redis_client, settings=settings)
    consumer = StreamConsumer(client=redis_client, settings=settings, handler=service, name="c1")
    consumer.ensure_groups()
    assert _drain(consumer, 2) == 2

    rows = _turn_rows(tenant, "alice")
    assert [r.content for r in rows] == ["I prefer window seats on long flights"]
    assert str(rows[0].id) == first.event_id
    memory = WorkingMemoryStore(redis_client, settings).read(tenant, "alice")
    assert memory is not None
    assert [t.id for t in memory.turns] == [first.event_id]
    with unit_of_work(tenant) as session:
        assert session.scalar(select(func.sum(Session.turn_count))) == 1


def test_replayed_batch_changes_nothing(settings: Settings, redis_client, tenant: str) -> None:
    producer = EventProducer(redis_client, settings)
    producer.send_many([turn(tenant, "bob", n) for n in range(30)])
    captured = []

    service = IngestService(client=redis_client, settings=settings)

    def handler(entries):  # type: ignore[no-untyped-def]
        captured.extend(entries)
        service(entries)

    consumer = StreamConsumer(client=redis_client, settings=settings, handler=handler, name="c1")
    consumer.ensure_groups()
    assert _drain(consumer, 30) == 30
    store = WorkingMemoryStore(redis_client, settings)
    before = store.read(tenant, "bob")

    service(captured)  # the consumer crashed after commit, before XACK: replay
    service(captured)

    rows = _turn_rows(tenant, "bob")
    assert len(rows) == 30
    with unit_of_work(tenant) as session:
        assert session.scalar(select(func.sum(Session.turn_count))) == 30
    after = store.read(tenant, "bob")
    assert after == before
    assert len(after.turns) == settings.working_turns
    assert after.turns_summarised == 30 - settings.working_turns
