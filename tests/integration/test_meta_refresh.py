"""L5 upkeep against real Postgres: hot-memories refresh, access pruning, procedure confidence."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.config import Settings
from app.db.session import owner_engine, unit_of_work
from app.layers.meta import maintenance
from app.layers.meta.access import insert_patterns
from app.layers.meta.repository import register_tenants
from app.scoring.procedural import confidence
from app.services import meta_refresh
from app.services.jobs import ALL_TENANTS, run_job
from app.services.partitions import PARTITIONS_JOB

HOT = text("SELECT memory_id, recent_hits FROM meta.hot_memories WHERE user_id = :user")


@pytest.fixture
def other_tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def register(*tenant_ids: str) -> None:
    with unit_of_work() as db:
        register_tenants(session=db, tenant_ids=tenant_ids)


def add_memory(tenant: str, user: str, content: str) -> uuid.UUID:
    memory_id = uuid.uuid4()
    with unit_of_work(tenant) as db:
        db.execute(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
                " occurred_at, valid_from, content_hash)"
                " VALUES (:id, :tenant, :user, 'fact', :content, now(), now(), :hash)"
            ),
            {
                "id": memory_id,
                "tenant": tenant,
                "user": user,
                "content": content,
                "hash": hashlib.sha256(content.encode()).hexdigest(),
            },
        )
    return memory_id


def add_access(tenant: str, user: str, hits: Sequence[uuid.UUID], at: datetime) -> str:
    pattern_id = str(uuid.uuid4())
    record = {
        "id": pattern_id,
        "channel": "web",
        "query": "what did we decide",
        "hit_ids": [str(h) for h in hits],
        "scores": [1.0] * len(hits),
        "at": at.isoformat(),
    }
    with unit_of_work(tenant) as db:
        insert_patterns(session=db, tenant_id=tenant, user_id=user, records=[record])
    return pattern_id


def hot(tenant: str, user: str) -> dict[uuid.UUID, int]:
    with unit_of_work(tenant) as db:
        return {row.memory_id: row.recent_hits for row in db.execute(HOT, {"user": user})}


def pattern_ids(tenant: str) -> set[str]:
    with unit_of_work(tenant) as db:
        return {str(i) for i in db.scalars(text("SELECT id FROM meta.access_patterns"))}


def last_run(job: str, tenant: str) -> Any:
    with unit_of_work(tenant) as db:
        return db.execute(
            text(
                "SELECT status, rows, detail FROM meta.job_runs WHERE job = :job"
                " ORDER BY started_at DESC LIMIT 1"
            ),
            {"job": job},
        ).one()


def db_now() -> datetime:
    with unit_of_work() as db:
        return db.execute(text("SELECT clock_timestamp()")).scalar_one()


def test_refresh_shows_new_memories_and_recent_hits(
    settings: Settings, tenant: str, other_tenant: str
) -> None:
    register(tenant, other_tenant)
    known = add_memory(tenant, "alice", "Alice's team ships on Thursdays")
    assert meta_refresh.refresh_hot_memories(settings) is not None
    fresh = add_memory(tenant, "alice", "Alice moved the launch to March")
    add_access(tenant, "alice", [known], datetime.now(UTC) - timedelta(hours=1))
    theirs = add_memory(other_tenant, "alice", "another tenant's Alice")

    before = hot(tenant, "alice")
    assert fresh not in before and before[known] == 0

    result = meta_refresh.refresh_hot_memories(settings)

    assert result is not None and result.rows > 0 and result.duration_s >= 0
    after = hot(tenant, "alice")
    assert set(after) == {known, fresh}
    assert after[known] == 1 and after[fresh] == 0
    assert set(hot(other_tenant, "alice")) == {theirs}
    with unit_of_work(engine=owner_engine(settings)) as db:
        in_view = db.execute(text("SELECT count(*) FROM meta.hot_memories_mv")).scalar_one()
    run = last_run(meta_refresh.REFRESH_JOB, ALL_TENANTS)
    assert run.status == "done" and run.rows == result.rows == in_view
    assert run.detail["reason"] == "schedule" and run.detail["duration_ms"] >= 0


def test_a_plain_refresh_would_block_readers(settings: Settings, tenant: str) -> None:
    """The control for the next test: its reader does notice a lock that blocks it."""
    register(tenant)
    with owner_engine(settings).connect() as owner:
        owner.execute(text("REFRESH MATERIALIZED VIEW meta.hot_memories_mv"))  # not CONCURRENTLY
        with pytest.raises(OperationalError, match="lock timeout"), unit_of_work(tenant) as db:
            db.execute(text("SELECT set_config('lock_timeout', '200ms', true)"))
            db.execute(HOT, {"user": "alice"}).all()
        owner.rollback()


def test_concurrent_refresh_does_not_block_readers(settings: Settings, tenant: str) -> None:
    """A reader reads (the old contents) while the refresh holds its lock, and finishes
    before the refresh's transaction commits; the new contents appear at the commit."""
    register(tenant)
    known = add_memory(tenant, "alice", "Alice takes the 8:10 train")
    assert meta_refresh.refresh_hot_memories(settings) is not None
    fresh = add_memory(tenant, "alice", "Alice switched to the 7:40 train")

    refreshing, committing, done = threading.Event(), threading.Event(), threading.Event()
    reads: list[set[uuid.UUID]] = []
    finished_before_commit: list[bool] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            assert refreshing.wait(30)
            for _ in range(5):
                with unit_of_work(tenant) as db:
                    # Blocked for this long, the read fails instead of waiting for the commit.
                    db.execute(text("SELECT set_config('lock_timeout', '20s', true)"))
                    reads.append({row.memory_id for row in db.execute(HOT, {"user": "alice"})})
            finished_before_commit.append(not committing.is_set())
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    with unit_of_work(engine=owner_engine(settings)) as owner:
        maintenance.refresh_hot_memories(session=owner)
        held = set(
            owner.scalars(
                text(
                    "SELECT mode FROM pg_locks WHERE granted AND pid = pg_backend_pid()"
                    " AND relation = to_regclass('meta.hot_memories_mv')"
                )
            )
        )
        refreshing.set()
        # Keep the refresh's transaction (and its lock) open while the reader works.
        for _ in range(600):
            if done.is_set():
                break
            owner.execute(text("SELECT pg_sleep(0.05)"))
        committing.set()
    thread.join(30)

    assert errors == []
    assert "ExclusiveLock" in held and "AccessExclusiveLock" not in held
    assert finished_before_commit == [True]
    assert len(reads) == 5 and all(seen == {known} for seen in reads)
    assert set(hot(tenant, "alice")) == {known, fresh}


def test_two_refreshes_at_once_run_once(
    settings: Settings, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(tenant)
    real = maintenance.refresh_hot_memories
    inside, release = threading.Event(), threading.Event()

    def slow_refresh(*, session: Any) -> int:
        rows = real(session=session)
        inside.set()
        assert release.wait(30)
        return rows

    monkeypatch.setattr(maintenance, "refresh_hot_memories", slow_refresh)
    since = db_now()
    first: list[meta_refresh.RefreshResult | None] = []
    thread = threading.Thread(
        target=lambda: first.append(meta_refresh.refresh_hot_memories(settings)), daemon=True
    )
    thread.start()
    try:
        assert inside.wait(30)
        second = meta_refresh.refresh_hot_memories(settings)
    finally:
        release.set()
        thread.join(30)

    assert second is None
    assert len(first) == 1 and first[0] is not None
    with unit_of_work(ALL_TENANTS) as db:
        runs = db.execute(
            text("SELECT count(*) FROM meta.job_runs WHERE job = :job AND started_at >= :since"),
            {"job": meta_refresh.REFRESH_JOB, "since": since},
        ).scalar_one()
    assert runs == 1


def test_refresh_after_ingest_waits_for_enough_new_memories(
    settings: Settings, tenant: str
) -> None:
    register(tenant)
    settings = settings.model_copy(update={"meta_refresh_after_memories": 3})
    assert meta_refresh.refresh_hot_memories(settings) is not None
    first = [add_memory(tenant, "bob", f"Bob fact {n}") for n in range(2)]

    assert meta_refresh.maybe_refresh_after_ingest(settings) is None
    assert not set(first) & set(hot(tenant, "bob"))

    third = add_memory(tenant, "bob", "Bob fact 2")
    result = meta_refresh.maybe_refresh_after_ingest(settings)

    assert result is not None
    assert set(hot(tenant, "bob")) == {*first, third}
    assert last_run(meta_refresh.REFRESH_JOB, ALL_TENANTS).detail["reason"] == "3+ new memories"
    assert meta_refresh.maybe_refresh_after_ingest(settings) is None


def test_pruning_removes_only_old_patterns_one_tenant_at_a_time(
    settings: Settings, tenant: str, other_tenant: str
) -> None:
    register(tenant, other_tenant)
    now = datetime.now(UTC)
    window = timedelta(days=settings.access_retention_days)
    old, young = now - window - timedelta(hours=1), now - window + timedelta(hours=1)
    my_young = {add_access(tenant, "alice", [], young) for _ in range(2)}
    for _ in range(5):
        add_access(tenant, "alice", [], old)
    their_old = {add_access(other_tenant, "alice", [], old) for _ in range(3)}
    their_young = {add_access(other_tenant, "alice", [], young)}

    # Another worker holds the other tenant's pruning (and the partitions' upkeep, which
    # would drop a day wholly past the cutoff for every tenant): this pass must not touch
    # the other tenant's rows.
    with (
        run_job(meta_refresh.PRUNE_JOB, other_tenant) as holder,
        run_job(PARTITIONS_JOB, ALL_TENANTS, scope="meta.access_patterns") as upkeep,
    ):
        assert holder is not None and upkeep is not None
        meta_refresh.prune_access_patterns(settings, now, batch=2)

    assert pattern_ids(tenant) == my_young
    assert pattern_ids(other_tenant) == their_old | their_young
    run = last_run(meta_refresh.PRUNE_JOB, tenant)
    assert run.status == "done" and run.rows == 5

    meta_refresh.prune_access_patterns(settings, now, batch=2)

    assert pattern_ids(other_tenant) == their_young
    assert last_run(meta_refresh.PRUNE_JOB, other_tenant).rows == 3
    assert pattern_ids(tenant) == my_young
    assert last_run(meta_refresh.PRUNE_JOB, tenant).rows == 0


CASES = [
    (0.0, 0),
    (0.37, 3),
    (0.5, 10),
    (0.9, 1),
    (1.0, 0),
    (0.123456789, 7),
    (0.61, 2**31 - 1),
    (1.5, 4),
    (-0.2, 5),
    (float("nan"), 6),
]


def test_recompute_sets_confidence_by_the_python_formula(settings: Settings, tenant: str) -> None:
    register(tenant)
    rows = []
    for n, (avg, executions) in enumerate(CASES):
        stored = confidence(avg, executions) if n == 0 else 0.999  # one row is right already
        rows.append(
            {
                "id": str(uuid.uuid4()),
                "n": n,
                "avg": avg,
                "executions": executions,
                "confidence": stored,
            }
        )
    with unit_of_work(tenant) as db:
        for row in rows:
            db.execute(
                text(
                    "INSERT INTO meta.procedures (id, tenant_id, user_id, query_pattern,"
                    " pattern_hash, tool_sequence, sequence_hash, executions, avg_success,"
                    " confidence) VALUES (:id, :tenant, 'alice', :pattern, :pattern_hash,"
                    " CAST('[]' AS jsonb), :sequence_hash, :executions, :avg, :confidence)"
                ),
                {
                    **row,
                    "tenant": tenant,
                    "pattern": f"pattern {row['n']}",
                    "pattern_hash": f"p{row['n']}",
                    "sequence_hash": f"s{row['n']}",
                },
            )

    meta_refresh.recompute_procedure_confidence(settings)

    assert last_run(meta_refresh.PROCEDURES_JOB, tenant).rows == len(CASES) - 1
    with unit_of_work(tenant) as db:
        query = text("SELECT query_pattern, confidence FROM meta.procedures")
        stored = {row.query_pattern: row.confidence for row in db.execute(query)}
    for n, (avg, executions) in enumerate(CASES):
        assert stored[f"pattern {n}"] == confidence(avg, executions), (avg, executions)

    assert meta_refresh.recompute_procedure_confidence(settings) == 0
    assert last_run(meta_refresh.PROCEDURES_JOB, tenant).rows == 0


def test_old_job_runs_are_pruned_and_recent_ones_kept(settings: Settings, tenant: str) -> None:
    from app.services.meta_refresh import prune_job_runs

    now = datetime(2026, 6, 1, tzinfo=UTC)
    with unit_of_work(tenant) as session:
        for job, age in (("old", 40), ("recent", 2)):
            session.execute(
                text(
                    "INSERT INTO meta.job_runs (id, tenant_id, job, status, started_at,"
                    " finished_at) VALUES (gen_random_uuid(), :t, :job, 'done', :at, :at)"
                ),
                {"t": tenant, "job": job, "at": now - timedelta(days=age)},
            )
    assert prune_job_runs(settings, now) >= 1
    with unit_of_work(tenant) as session:
        left = session.execute(text("SELECT job FROM meta.job_runs")).scalars().all()
    assert left == ["recent"]
