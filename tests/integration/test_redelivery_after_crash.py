"""A worker SIGKILLed mid-batch loses nothing and duplicates nothing once another reclaims."""

from __future__ import annotations

import contextlib
import signal

import pytest
import redis
from sqlalchemy import func, select

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.episodic.models import Session, Turn
from app.layers.working.store import WorkingMemoryStore
from app.streams.producer import EventProducer
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

pytestmark = pytest.mark.slow

USERS = 40
PER_USER = 250


def _count(tenant: str) -> int:
    with unit_of_work(tenant) as session:
        return int(session.scalar(select(func.count()).select_from(Turn)) or 0)


def _pending(client, settings: Settings) -> int:  # type: ignore[no-untyped-def]
    keys = RedisKeys.from_settings(settings).partitions(settings.stream_partitions)
    total = 0
    for key in keys:
        with contextlib.suppress(redis.ResponseError):  # group not created yet
            total += int(client.xpending(key, settings.consumer_group)["pending"])
    return total


def _consumers_of(client, settings: Settings, pid: int) -> set[str]:  # type: ignore[no-untyped-def]
    """Consumers (named host:pid:index:nonce) that a worker process registered in the group."""
    names: set[str] = set()
    for key in RedisKeys.from_settings(settings).partitions(settings.stream_partitions):
        with contextlib.suppress(redis.ResponseError):
            names |= {
                c["name"].decode() for c in client.xinfo_consumers(key, settings.consumer_group)
            }
    return {name for name in names if name.split(":")[1] == str(pid)}


def test_sigkill_mid_batch_then_reclaim_is_exactly_once(
    settings: Settings, redis_client, tenant: str
) -> None:
    settings = settings.model_copy(update={"claim_min_idle_ms": 1000})
    total = USERS * PER_USER
    events = [turn(tenant, f"user-{n % USERS}", n) for n in range(total)]
    producer = EventProducer(redis_client, settings)
    for start in range(0, total, 1000):
        producer.send_many(events[start : start + 1000])

    with celery_worker(settings, ENGRAM_CONSUMER_BATCH_SIZE="200") as doomed:
        # Killed once it has stored some turns and holds more unacknowledged (between two
        # batches it may briefly hold none).
        assert wait_for(
            lambda: _count(tenant) > 0 and _pending(redis_client, settings) > 0,
            timeout=60,
            every=0.02,
        )
        held = _pending(redis_client, settings)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    assert held > 0, "the worker was killed with nothing in flight; the test proves nothing"
    stored_at_kill = _count(tenant)
    assert _consumers_of(redis_client, settings, doomed.pid), "the dead consumer is registered"
    assert stored_at_kill < total, "the worker finished before it was killed"

    with celery_worker(settings):
        assert wait_for(lambda: _count(tenant) == total, timeout=120)
        assert wait_for(lambda: _pending(redis_client, settings) == 0, timeout=30)
        # Its entries reclaimed, the killed worker's consumer leaves the group.
        assert wait_for(lambda: not _consumers_of(redis_client, settings, doomed.pid), 90)

    with unit_of_work(tenant) as session:
        assert session.scalar(select(func.count(func.distinct(Turn.external_id)))) == total
        assert session.scalar(select(func.sum(Session.turn_count))) == total
    store = WorkingMemoryStore(redis_client, settings)
    for user in range(USERS):
        memory = store.read(tenant, f"user-{user}")
        assert memory is not None
        ids = [t.id for t in memory.turns]
        assert len(ids) == len(set(ids)) == settings.working_turns
        assert memory.turns_summarised == PER_USER - settings.working_turns
    keys = RedisKeys.from_settings(settings)
    assert redis_client.xlen(keys.dead_letters()) == 0
    assert int(redis_client.get(keys.lost_entries()) or 0) == 0
