"""Decay on real Postgres: the SQL follows the formula, archives under the floor, keeps the
raw trace, is idempotent per tick and runs once when started twice at the same time."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.meta.repository import register_tenants
from app.scoring.decay import decayed, half_life_days
from app.services import decay
from app.services.jobs import recent_runs

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def _memory(
    session: object,
    tenant: str,
    user: str,
    content: str,
    *,
    importance: float,
    idle_days: float,
    access_count: int = 0,
    emotional: float = 0.0,
    consolidation: float = 0.0,
) -> uuid.UUID:
    memory_id = uuid.uuid4()
    at = NOW - timedelta(days=idle_days)
    session.execute(  # type: ignore[attr-defined]
        text(
            "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, content_hash,"
            " importance, emotional_intensity, consolidation_strength, access_count,"
            " occurred_at, valid_from, created_at, last_accessed_at)"
            " VALUES (:id, :tenant, :user, 'fact', :content, :hash, :importance, :emotional,"
            " :consolidation, :access, :at, :at, :at, :at)"
        ),
        {
            "id": memory_id,
            "tenant": tenant,
            "user": user,
            "content": content,
            "hash": uuid.uuid4().hex,
            "importance": importance,
            "emotional": emotional,
            "consolidation": consolidation,
            "access": access_count,
            "at": at,
        },
    )
    return memory_id


def _state(tenant: str, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[float, bool]]:
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT id, importance, archived_at IS NOT NULL FROM semantic.memories"
                " WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids},
        ).all()
    return {r[0]: (float(r[1]), bool(r[2])) for r in rows}


@pytest.fixture
def decay_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"decay_batch": 7})  # several batches per tenant


def test_decay_follows_the_formula_and_archives_under_the_floor(
    tenant: str, decay_settings: Settings
) -> None:
    cases = [
        (0.8, 30, 0, 0.0, 0.0),
        (0.8, 30, 3, 0.0, 0.0),
        (0.8, 30, 0, 1.0, 0.0),
        (0.8, 30, 0, 0.0, 1.0),
        (0.5, 0, 0, 0.0, 0.0),
        (0.1, 200, 0, 0.0, 0.0),  # under the floor after 200 idle days: archived
    ] + [(0.6, n, 0, 0.0, 0.0) for n in range(10)]
    with unit_of_work(tenant) as session:
        register_tenants(session=session, tenant_ids=[tenant])
        ids = [
            _memory(
                session,
                tenant,
                f"u{i % 5}",  # five users, in batches of about 7 memories: three batches
                f"memory {i}",
                importance=w,
                idle_days=d,
                access_count=a,
                emotional=e,
                consolidation=c,
            )
            for i, (w, d, a, e, c) in enumerate(cases)
        ]
    tick = decay.tick_of(NOW, decay_settings.decay_interval_s)
    done = decay.decay_pass(decay_settings, tick, tenant_id=tenant)
    assert done == (len(cases), 1)
    state = _state(tenant, ids)
    for memory_id, (w, d, a, e, c) in zip(ids, cases, strict=True):
        h = half_life_days(30, access_count=a, emotional_intensity=e, consolidation=c)
        expected = decayed(w, idle_days=d, half_life=h)
        assert state[memory_id][0] == pytest.approx(expected, rel=1e-9)
        assert state[memory_id][1] == (expected < decay_settings.decay_floor)
    runs = recent_runs(tenant)
    assert runs[0].job == "decay" and runs[0].status == "done" and runs[0].rows == len(cases)

    # The same tick again (a second beat, a retry): nothing changes.
    assert decay.decay_pass(decay_settings, tick, tenant_id=tenant) == (0, 0)
    assert _state(tenant, ids) == state
    # An hour later: one more hour of decay, from where the last pass left off.
    later = decay.decay_pass(decay_settings, tick + timedelta(hours=1), tenant_id=tenant)
    assert later is not None and later[0] == len(cases) - 1  # the archived one rests
    w0 = _state(tenant, [ids[0]])[ids[0]][0]
    assert w0 == pytest.approx(decayed(0.4, idle_days=1 / 24, half_life=30), rel=1e-9)


def test_archived_memories_leave_search_and_restore_brings_them_back(
    tenant: str, settings: Settings
) -> None:
    from app.embedding.factory import get_embedder
    from app.services.memories import RememberRequest, remember
    from app.services.search import SearchRequest, search

    embedder = get_embedder(settings)
    stored = remember(
        tenant,
        RememberRequest(
            user_id="u1",
            memories=[
                {"content": "The boiler service is booked with Hendrik.", "importance": 0.05}
            ],
        ),
        settings=settings,
        embedder=embedder,
    )
    memory_id = stored[0].id
    with unit_of_work(tenant) as session:
        register_tenants(session=session, tenant_ids=[tenant])
        session.execute(
            text("UPDATE semantic.memories SET created_at = :at, last_accessed_at = NULL"),
            {"at": NOW - timedelta(days=90)},
        )
        turn_count = session.execute(text("SELECT count(*) FROM episodic.turns")).scalar_one()
    decay.decay_pass(settings, decay.tick_of(NOW, 3600), tenant_id=tenant)
    request = SearchRequest(user_id="u1", query="who services the boiler?")
    assert memory_id not in {
        h.id for h in search(tenant, request, settings=settings, embedder=embedder).hits
    }
    archived = request.model_copy(update={"include_archived": True})
    assert memory_id in {
        h.id for h in search(tenant, archived, settings=settings, embedder=embedder).hits
    }

    assert decay.restore_memories(settings, tenant, [memory_id], now=NOW) == [memory_id]
    hits = search(tenant, request, settings=settings, embedder=embedder).hits
    assert hits and hits[0].id == memory_id
    assert hits[0].importance == pytest.approx(settings.restore_importance)
    with unit_of_work(tenant) as session:
        assert (
            session.execute(text("SELECT count(*) FROM episodic.turns")).scalar_one() == turn_count
        )


def test_raw_trace_never_decays(tenant: str, settings: Settings) -> None:
    from app.layers.episodic.models import Session, Turn

    started = NOW - timedelta(days=400)
    with unit_of_work(tenant) as session:
        register_tenants(session=session, tenant_ids=[tenant])
        s = Session(tenant_id=tenant, user_id="u1", started_at=started, last_turn_at=started)
        session.add(s)
        session.flush()
        session.add(
            Turn(
                id=uuid.uuid4(),
                tenant_id=tenant,
                user_id="u1",
                session_id=s.id,
                external_id="t-1",
                role="user",
                content="a very old turn",
                channel="web",
                occurred_at=started,
                token_count=4,
            )
        )
        before = session.execute(text("SELECT * FROM episodic.turns")).all()
    decay.decay_pass(settings, decay.tick_of(NOW, 3600), tenant_id=tenant)
    with unit_of_work(tenant) as session:
        assert session.execute(text("SELECT * FROM episodic.turns")).all() == before


def test_the_same_pass_started_twice_at_once_applies_once(tenant: str, settings: Settings) -> None:
    many = settings.model_copy(update={"decay_batch": 100})
    with unit_of_work(tenant) as session:
        register_tenants(session=session, tenant_ids=[tenant])
        ids = [
            _memory(session, tenant, "u1", f"m{i}", importance=0.8, idle_days=30)
            for i in range(400)
        ]
    tick = decay.tick_of(NOW, 3600)
    results: list[object] = []
    barrier = threading.Barrier(2)

    def go() -> None:
        barrier.wait()
        results.append(decay.decay_pass(many, tick, tenant_id=tenant))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    applied = sum(r[0] for r in results if r is not None)  # type: ignore[index]
    assert applied == 400
    assert all(w == pytest.approx(0.4) for w, _ in _state(tenant, ids).values())
