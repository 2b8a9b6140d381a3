"""Row-level security: a tenant's rows are invisible and unwritable from any other scope."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.orm import Session

from app.config import Settings
from app.db.bootstrap import database_urls
from app.db.session import owner_engine, unit_of_work
from app.layers.episodic import repository
from app.layers.episodic.sessions import SessionSpan
from app.services.ingest import IngestService
from app.streams.consumer import StreamEntry
from app.streams.events import EVENT_NAMESPACE, EventValidationError, parse_event
from tests.integration.helpers import turn

AT = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(base_settings: Settings) -> Iterator[Engine]:
    """The application role over exactly one pooled connection, so every test reuses it."""
    eng = create_engine(database_urls(base_settings).app, pool_size=1, max_overflow=0)
    yield eng
    eng.dispose()


@pytest.fixture
def other_tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def seed(engine: Engine, tenant: str, user: str = "alice") -> tuple[uuid.UUID, uuid.UUID]:
    """One session with one turn for `tenant`, written through the repository."""
    session_id, turn_id = uuid.uuid4(), uuid.uuid4()
    with unit_of_work(tenant, engine=engine) as db:
        span = SessionSpan(session_id, user, AT, AT, {"web"}, is_new=True, touched=True)
        repository.upsert_sessions(session=db, tenant_id=tenant, spans=[span])
        inserted = repository.insert_turns(
            session=db,
            rows=[
                {
                    "id": turn_id,
                    "tenant_id": tenant,
                    "user_id": user,
                    "session_id": session_id,
                    "external_id": "m-1",
                    "role": "user",
                    "speaker": None,
                    "content": "my locker code is 4411",
                    "channel": "web",
                    "occurred_at": AT,
                    "token_count": 5,
                    "metadata": {},
                    "flags": [],
                    "stream_entry_id": "1-0",
                }
            ],
        )
        assert inserted == [(turn_id, session_id)]
    return session_id, turn_id


def visible(db: Session, session_id: uuid.UUID, turn_id: uuid.UUID) -> tuple[int, int]:
    sessions = db.scalar(
        text("SELECT count(*) FROM episodic.sessions WHERE id = :id"), {"id": session_id}
    )
    turns = db.scalar(text("SELECT count(*) FROM episodic.turns WHERE id = :id"), {"id": turn_id})
    return int(sessions or 0), int(turns or 0)


def backend_pid(db: Session) -> int:
    return int(db.scalar(text("SELECT pg_backend_pid()")) or 0)


def tenant_setting(db: Session) -> str | None:
    return db.scalar(text("SELECT current_setting('engram.tenant_id', true)"))


def test_owner_sees_its_rows(engine: Engine, tenant: str) -> None:
    session_id, turn_id = seed(engine, tenant)
    with unit_of_work(tenant, engine=engine) as db:
        assert visible(db, session_id, turn_id) == (1, 1)


def test_rows_are_invisible_to_another_tenant(
    engine: Engine, tenant: str, other_tenant: str
) -> None:
    session_id, turn_id = seed(engine, tenant)
    with unit_of_work(other_tenant, engine=engine) as db:
        assert visible(db, session_id, turn_id) == (0, 0)
        leaked = db.scalar(
            text("SELECT count(*) FROM episodic.turns WHERE tenant_id = :t"), {"t": tenant}
        )
        assert leaked == 0


def test_setting_does_not_outlive_the_transaction_on_a_reused_connection(
    engine: Engine, tenant: str
) -> None:
    session_id, turn_id = seed(engine, tenant)
    with unit_of_work(tenant, engine=engine) as db:
        pid = backend_pid(db)
        assert tenant_setting(db) == tenant
        assert visible(db, session_id, turn_id) == (1, 1)
    with unit_of_work(engine=engine) as db:
        assert backend_pid(db) == pid  # the very connection tenant A just used
        assert tenant_setting(db) in (None, "")
        assert visible(db, session_id, turn_id) == (0, 0)
        assert db.scalar(text("SELECT count(*) FROM episodic.sessions")) == 0


def test_setting_is_dropped_after_a_failed_transaction(engine: Engine, tenant: str) -> None:
    session_id, turn_id = seed(engine, tenant)
    with pytest.raises(ZeroDivisionError), unit_of_work(tenant, engine=engine) as db:
        pid = backend_pid(db)
        raise ZeroDivisionError
    with unit_of_work(engine=engine) as db:
        assert backend_pid(db) == pid
        assert tenant_setting(db) in (None, "")
        assert visible(db, session_id, turn_id) == (0, 0)


INSERT_SESSION = text(
    "INSERT INTO episodic.sessions (id, tenant_id, user_id, started_at, last_turn_at) "
    "VALUES (:id, :tenant, 'mallory', :at, :at)"
)


def test_writing_a_row_for_another_tenant_is_refused(
    engine: Engine, tenant: str, other_tenant: str
) -> None:
    with (
        pytest.raises(ProgrammingError, match="row-level security"),
        unit_of_work(other_tenant, engine=engine) as db,
    ):
        db.execute(INSERT_SESSION, {"id": uuid.uuid4(), "tenant": tenant, "at": AT})


def test_writing_without_a_tenant_setting_is_refused(engine: Engine, tenant: str) -> None:
    with pytest.raises(DBAPIError, match="row-level security"), unit_of_work(engine=engine) as db:
        db.execute(INSERT_SESSION, {"id": uuid.uuid4(), "tenant": tenant, "at": AT})
    with unit_of_work(tenant, engine=engine) as db:
        assert db.scalar(text("SELECT count(*) FROM episodic.sessions")) == 0


def test_a_row_cannot_be_moved_to_another_tenant(
    engine: Engine, tenant: str, other_tenant: str
) -> None:
    session_id, _ = seed(engine, tenant)
    with (
        pytest.raises(ProgrammingError, match="row-level security"),
        unit_of_work(tenant, engine=engine) as db,
    ):
        db.execute(
            text("UPDATE episodic.sessions SET tenant_id = :other WHERE id = :id"),
            {"other": other_tenant, "id": session_id},
        )


def test_another_tenant_cannot_update_or_delete_rows(
    engine: Engine, tenant: str, other_tenant: str
) -> None:
    session_id, turn_id = seed(engine, tenant)
    with unit_of_work(other_tenant, engine=engine) as db:
        updated = db.execute(
            text("UPDATE episodic.turns SET content = 'pwned' WHERE id = :id"), {"id": turn_id}
        )
        deleted = db.execute(
            text("DELETE FROM episodic.sessions WHERE id = :id"), {"id": session_id}
        )
        assert (updated.rowcount, deleted.rowcount) == (0, 0)
    with unit_of_work(tenant, engine=engine) as db:
        assert visible(db, session_id, turn_id) == (1, 1)
        content = db.scalar(
            text("SELECT content FROM episodic.turns WHERE id = :id"), {"id": turn_id}
        )
        assert content == "my locker code is 4411"


# -- hot memories: the materialized view is owner-only, the view filters by tenant ---------------


def add_memory(engine: Engine, tenant: str) -> uuid.UUID:
    memory_id = uuid.uuid4()
    with unit_of_work(tenant, engine=engine) as db:
        db.execute(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, "
                "occurred_at, valid_from, content_hash) "
                "VALUES (:id, :tenant, 'alice', 'fact', :content, now(), now(), :hash)"
            ),
            {
                "id": memory_id,
                "tenant": tenant,
                "content": f"fact of {tenant}",
                "hash": hashlib.sha256(tenant.encode()).hexdigest(),
            },
        )
    return memory_id


def test_application_role_cannot_read_the_materialized_view(engine: Engine, tenant: str) -> None:
    with (
        pytest.raises(ProgrammingError, match="permission denied"),
        unit_of_work(tenant, engine=engine) as db,
    ):
        db.execute(text("SELECT count(*) FROM meta.hot_memories_mv"))


def test_hot_memories_view_shows_only_the_current_tenant(
    engine: Engine, base_settings: Settings, tenant: str, other_tenant: str
) -> None:
    mine = add_memory(engine, tenant)
    theirs = add_memory(engine, other_tenant)
    with owner_engine(base_settings).begin() as conn:
        conn.execute(text("REFRESH MATERIALIZED VIEW meta.hot_memories_mv"))

    query = text("SELECT memory_id FROM meta.hot_memories")
    with unit_of_work(tenant, engine=engine) as db:
        assert set(db.scalars(query)) == {mine}
    with unit_of_work(other_tenant, engine=engine) as db:
        assert set(db.scalars(query)) == {theirs}
    with unit_of_work(engine=engine) as db:
        assert list(db.scalars(query)) == []


# -- ids are global primary keys: another tenant must not be able to pre-empt them ---------------


def entry(event: dict[str, object], entry_id: str) -> StreamEntry:
    return StreamEntry("test-stream", entry_id, {"event": json.dumps(event)})


def test_another_tenant_cannot_preempt_a_tenants_event_ids(
    engine: Engine,
    settings: Settings,
    redis_client: redis.Redis,
    tenant: str,
    other_tenant: str,
) -> None:
    victim_id = uuid.uuid5(EVENT_NAMESPACE, f"turn\x1f{tenant}\x1falice\x1fm-1")
    with pytest.raises(EventValidationError) as refused:
        parse_event(turn(other_tenant, "alice", 1, event_id=str(victim_id)))
    assert refused.value.fields == ["event_id"]

    # The same producer ids in two tenants are two events, and both are stored.
    service = IngestService(client=redis_client, settings=settings, engine=engine)
    service.handle([entry(turn(other_tenant, "alice", 1), "1-0")])
    service.handle([entry(turn(tenant, "alice", 1), "2-0")])
    for owner in (tenant, other_tenant):
        with unit_of_work(owner, engine=engine) as db:
            assert db.scalar(text("SELECT count(*) FROM episodic.turns")) == 1
