"""Fault sweep: races and faults the other fault tests do not stage, each pinned here.

Real Postgres and Redis throughout (private servers where a test breaks them); each test says
which promise it holds and what broke it before the fix.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.extraction.factory import get_extractor
from app.layers.episodic import repository as episodic
from app.services import extraction
from app.services.forget import forget_user
from app.services.ingest import user_lock_key
from app.services.sessions_clear import clear_session
from app.streams.producer import EventProducer
from tests.faults.tally import dead_letters, transient_errors
from tests.integration.helpers import turn, wait_for
from tests.integration.test_backlog_drains_without_beat import Ingest, say
from tests.integration.workers import celery_worker
from tests.private_redis import PrivateRedis

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


@pytest.fixture
def ingest(settings: Settings, redis_client: redis.Redis) -> Ingest:
    return Ingest(settings, redis_client)


def _rows(tenant: str, sql: str, **params: Any) -> list[Any]:
    with unit_of_work(tenant, all_agents=True) as session:
        return list(session.execute(text(sql), params))


def _sessions(tenant: str, user: str) -> list[uuid.UUID]:
    rows = _rows(
        tenant,
        "SELECT id FROM episodic.sessions WHERE user_id = :u ORDER BY started_at",
        u=user,
    )
    return [r.id for r in rows]


# -- a session cleared while its turns are being extracted ---------------------------------


def test_a_session_cleared_mid_extraction_leaves_no_memory_of_it(
    settings: Settings, ingest: Ingest, redis_client: redis.Redis, tenant: str
) -> None:
    """Clearing a session promises its memories go; a batch extracted before the clear and
    stored after it must not bring them back (citing turns that no longer exist). Before the
    fix the store hit a foreign-key violation (mentions → the deleted turns) on every retry,
    so the batch was parked 'failed' and the other session's turns were never extracted."""
    user = "cleo"
    gap = timedelta(seconds=settings.session_idle_timeout_s * 3)
    first = [say(tenant, user, n) for n in range(6)]
    second = [
        {**say(tenant, user, n), "timestamp": (T0 + gap + timedelta(minutes=n)).isoformat()}
        for n in range(6, 12)
    ]
    ingest(first + second)
    doomed, kept = _sessions(tenant, user)
    refs = extraction.claim(settings, tenant, {user: "turns"})
    assert len(refs) == 1
    assert extraction.extract(settings, get_extractor(settings), refs).done == 1
    assert extraction.embed(settings, ingest.embedder, refs).done == 1

    clear_session(tenant, user, doomed, settings=settings, client=redis_client)
    report = extraction.store(settings, ingest.embedder, refs)
    assert report.failed == 0

    turns = {
        r.id for r in _rows(tenant, "SELECT id FROM episodic.turns WHERE user_id = :u", u=user)
    }
    memories = _rows(
        tenant,
        "SELECT id, session_id, source_turn_ids FROM semantic.memories WHERE user_id = :u",
        u=user,
    )
    assert memories, "the kept session's turns made no memory; the test proves nothing"
    orphans = [m for m in memories if not {uuid.UUID(str(t)) for t in m.source_turn_ids} <= turns]
    assert orphans == [], f"{len(orphans)} memories cite turns of the cleared session"
    assert all(m.session_id == kept for m in memories)


def test_a_user_forgotten_mid_extraction_stays_forgotten(
    settings: Settings, ingest: Ingest, redis_client: redis.Redis, tenant: str
) -> None:
    """Forgetting a user between the extract and store steps of their batch: the store finds
    no batch and writes nothing, so no memory of the forgotten user comes back."""
    user = "fergus"
    ingest([say(tenant, user, n) for n in range(6)])
    refs = extraction.claim(settings, tenant, {user: "turns"})
    assert extraction.extract(settings, get_extractor(settings), refs).done == 1
    assert extraction.embed(settings, ingest.embedder, refs).done == 1

    forget_user(tenant_id=tenant, user_id=user, settings=settings, client=redis_client)
    report = extraction.store(settings, ingest.embedder, refs)
    assert (report.done, report.failed) == (0, 0)
    left = _rows(
        tenant,
        "SELECT (SELECT count(*) FROM semantic.memories WHERE user_id = :u)"
        " + (SELECT count(*) FROM conceptual.entities WHERE user_id = :u)"
        " + (SELECT count(*) FROM semantic.extraction_batches WHERE user_id = :u) AS n",
        u=user,
    )
    assert left[0].n == 0


# -- outages while a batch is being extracted ----------------------------------------------


def test_outages_during_extraction_never_park_a_batch(
    settings: Settings, ingest: Ingest, tenant: str
) -> None:
    """A batch is parked 'failed' for an operator after `extract_max_attempts` failed
    attempts; a database outage is no attempt of the batch's. Before the fix, as many short
    outages as the maximum (each failing a step, then gone) parked a healthy batch."""
    from psycopg import errors as pg_errors
    from sqlalchemy.exc import OperationalError

    from app.services.extraction_steps import fail

    ingest([say(tenant, "otto", n) for n in range(4)])
    refs = extraction.claim(settings, tenant, {"otto": "turns"})
    assert len(refs) == 1
    batch_id = uuid.UUID(refs[0][1])
    outage = OperationalError("SELECT 1", {}, pg_errors.AdminShutdown("the server restarts"))
    for _ in range(settings.extract_max_attempts + 2):
        fail(settings, tenant, batch_id, outage)
    (state,) = _rows(
        tenant,
        "SELECT state, attempts, error FROM semantic.extraction_batches WHERE id = :b",
        b=batch_id,
    )
    assert (state.state, state.attempts) == ("claimed", 0)
    assert "the server restarts" in state.error
    fail(settings, tenant, batch_id, ValueError("the extractor's own fault"))
    (state,) = _rows(
        tenant, "SELECT attempts FROM semantic.extraction_batches WHERE id = :b", b=batch_id
    )
    assert state.attempts == 1
    assert extraction.extract(settings, get_extractor(settings), refs).done == 1


# -- Redis restarted empty under a running ingest worker -------------------------------------


def _stored(settings: Settings, tenant: str) -> dict[str, int]:
    """external id → turn rows of the tenant (`settings` names the run it belongs to)."""
    rows = _rows(
        tenant, "SELECT external_id, count(*) AS n FROM episodic.turns GROUP BY external_id"
    )
    return {r.external_id: int(r.n) for r in rows}


def _stream_entries(client: redis.Redis) -> int:
    """Entries held by every stream of the server."""
    return sum(int(client.xlen(key)) for key in client.scan_iter(_type="stream"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_redis_restarted_empty_the_running_worker_stores_what_comes_after(
    settings: Settings, tenant: str, tmp_path: Path
) -> None:
    """A Redis that keeps nothing on disk comes back empty (streams, groups, L1, queues gone):
    the worker that was running recreates its groups and stores every turn sent afterwards,
    once, with no restart and no operator step."""
    server = PrivateRedis(tmp_path / "redis", appendfsync=None)
    server.start()
    try:
        private = settings.model_copy(update={"redis_url": server.url})
        client = server.client()
        producer = EventProducer(client, private)
        before = [turn(tenant, f"u-{n % 4}", n) for n in range(40)]
        after = [turn(tenant, f"u-{n % 4}", n) for n in range(40, 80)]
        with celery_worker(private, REDIS_URL=server.url) as worker:
            producer.send_many(before)
            assert wait_for(lambda: len(_stored(private, tenant)) == 40, timeout=90)
            server.kill()
            server.start()
            # The running worker recreates its (empty) groups within milliseconds, so the
            # proof that nothing came back is that no stream holds an entry, not an empty db.
            assert _stream_entries(client) == 0
            producer = EventProducer(server.client(), private)
            producer.send_many(after)
            stored = wait_for(lambda: len(_stored(private, tenant)) == 80, timeout=90)
            assert worker.poll() is None, "the worker died with Redis"
        counts = _stored(private, tenant)
        assert stored, f"only {len(counts)} of 80 turns stored after the restart"
        assert set(counts.values()) == {1}
        assert dead_letters(server.client(), private) == []
    finally:
        server.kill()


# -- a lock wait that times out ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_lock_timeout_while_a_user_is_locked_is_waited_out_not_dead_lettered(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    """With `lock_timeout` set (a common guard-rail; here through PGOPTIONS), an ingest batch
    waiting on the user lock a long forget or session clear holds gets 55P03. That is a
    contended server, not the entries' fault: they must be retried until the lock is free and
    stored, never dead-lettered as poison after `max_deliveries`."""
    user = "locked-out"
    with unit_of_work(tenant, all_agents=True) as holder:
        episodic.lock_users(session=holder, keys=[user_lock_key(tenant, user)])
        with celery_worker(settings, PGOPTIONS="-c lock_timeout=100ms") as worker:
            EventProducer(redis_client, settings).send_many(
                [turn(tenant, user, n) for n in range(4)]
            )
            # The batch met the lock: the consumer backed off (its heartbeat, every 5 s,
            # counts it) or, before the fix, dead-lettered the entries as poison.
            timed_out = wait_for(
                lambda: (
                    transient_errors(redis_client, settings) > 0
                    or len(dead_letters(redis_client, settings)) > 0
                ),
                timeout=60,
            )
            letters_during = dead_letters(redis_client, settings)
            holder.rollback()
            stored = wait_for(lambda: len(_stored(settings, tenant)) == 4, timeout=90)
            assert worker.poll() is None
    assert timed_out, "the batch never met the lock; the test proves nothing"
    assert letters_during == [] and dead_letters(redis_client, settings) == []
    assert stored and set(_stored(settings, tenant).values()) == {1}
