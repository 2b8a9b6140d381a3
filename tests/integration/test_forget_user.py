"""Forgetting a user removes them from every layer and Redis, and nobody else."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
from sqlalchemy import Column, MetaData, String, Table, func, select

from app.config import Settings, get_settings
from app.db.models import TENANT_TABLES
from app.db.session import owner_engine, unit_of_work
from app.keys import RedisKeys
from app.layers.conceptual.models import Association, Entity, Mention, Relation
from app.layers.episodic.models import RawEvent, Session, Turn, TurnPassage
from app.layers.meta.models import AccessPattern, Procedure
from app.layers.semantic.models import ExtractionBatch, Memory, Replay
from app.layers.working.models import WorkingSummary
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.services import forget as forget_module
from app.services.forget import forget_user, user_tables

AT = datetime(2026, 1, 1, tzinfo=UTC)


def populate_sql(tenant: str, user: str) -> dict[str, int]:
    """One user's rows in every layer table, linked the way the pipeline links them."""
    with unit_of_work(tenant) as db:
        session = Session(tenant_id=tenant, user_id=user, started_at=AT, last_turn_at=AT)
        db.add(session)
        db.flush()
        turns = [
            Turn(
                id=uuid.uuid4(),
                tenant_id=tenant,
                user_id=user,
                session_id=session.id,
                external_id=f"m-{n}",
                role="user",
                content=f"turn {n} of {user}",
                channel="web",
                occurred_at=AT + timedelta(seconds=n),
                token_count=4,
            )
            for n in range(3)
        ]
        db.add_all(turns)
        db.flush()
        db.add_all(
            TurnPassage(
                turn_id=turn.id,
                tenant_id=tenant,
                user_id=user,
                ordinal=0,
                channel=turn.channel,
                occurred_at=turn.occurred_at,
                embedding=[0.1] * get_settings().embedding_dim,
            )
            for turn in turns
        )
        db.add(
            RawEvent(
                id=uuid.uuid4(),
                tenant_id=tenant,
                user_id=user,
                type="typing_start",
                known_type=True,
                occurred_at=AT,
            )
        )
        batch = ExtractionBatch(tenant_id=tenant, user_id=user, trigger="test", state="stored")
        db.add(batch)
        memories = [
            Memory(
                tenant_id=tenant,
                user_id=user,
                kind="fact",
                content=f"{user} lives in city {n}",
                content_hash=f"{user}-{n}",
                occurred_at=AT,
                valid_from=AT,
                session_id=session.id,
                source_turn_ids=[turns[n].id],
                extraction_batch_id=batch.id,
            )
            for n in range(2)
        ]
        db.add_all(memories)
        db.flush()
        memories[0].superseded_by = memories[1].id
        memories[0].valid_to = AT
        entities = [
            Entity(tenant_id=tenant, user_id=user, name=name, canonical_name=name.lower())
            for name in ("Alice", "Paris")
        ]
        db.add_all(entities)
        db.flush()
        db.add(
            Relation(
                tenant_id=tenant,
                user_id=user,
                source_entity_id=entities[0].id,
                target_entity_id=entities[1].id,
                relation_type="lives_in",
                memory_id=memories[1].id,
                turn_id=turns[1].id,
            )
        )
        db.add_all(
            Mention(
                tenant_id=tenant,
                user_id=user,
                entity_id=entity.id,
                memory_id=memories[1].id,
                turn_id=turns[1].id,
                surface=entity.name,
            )
            for entity in entities
        )
        low, high = sorted(m.id for m in memories)
        db.add(Association(tenant_id=tenant, user_id=user, memory_a=low, memory_b=high, weight=0.5))
        db.add(
            AccessPattern(
                tenant_id=tenant,
                user_id=user,
                channel="web",
                query="where do I live",
                query_hash="q1",
                hit_ids=[memories[1].id],
                scores=[0.9],
                hour_of_day=9,
            )
        )
        db.add(
            Procedure(
                tenant_id=tenant,
                user_id=user,
                query_pattern="deploy",
                pattern_hash="p1",
                tool_sequence=["build", "ship"],
                sequence_hash="s1",
            )
        )
        db.add(WorkingSummary(tenant_id=tenant, user_id=user, summary=f"{user} said hello"))
        db.add(
            Replay(tenant_id=tenant, user_id=user, cycle_id=uuid.uuid4(), memory_id=memories[0].id)
        )
    return row_counts(tenant, user)


def row_counts(tenant: str, user: str) -> dict[str, int]:
    """Rows per user table, read as the owner so row-level security hides nothing."""
    with owner_engine().connect() as conn:
        return {
            table.fullname: conn.execute(
                select(func.count())
                .select_from(table)
                .where(table.c.tenant_id == tenant, table.c.user_id == user)
            ).scalar_one()
            for table in user_tables()
        }


def populate_redis(client: redis.Redis, settings: Settings, tenant: str, user: str) -> None:
    keys = RedisKeys.from_settings(settings)
    WorkingMemoryStore(client, settings).push(
        {
            (tenant, user): [
                WorkingTurn(
                    id=f"{user}-w{n}",
                    role="user",
                    speaker=user,
                    channel="web",
                    content=f"hello {n}",
                    tokens=2,
                    at=AT + timedelta(seconds=n),
                )
                for n in range(2)
            ]
        }
    )
    client.set(keys.prefetch(tenant, user, "web"), json.dumps([]), ex=600)
    client.rpush(keys.access_buffer(tenant, user), json.dumps({"query": "q"}))
    client.sadd(keys.access_pending(), f"{tenant}|{user}")


def user_keys(client: redis.Redis, settings: Settings, tenant: str, user: str) -> set[bytes]:
    pattern = RedisKeys.from_settings(settings).user_pattern(tenant, user)
    return set(client.scan_iter(match=pattern, count=1000))


def memberships(client: redis.Redis, settings: Settings, tenant: str, user: str) -> set[str]:
    keys = RedisKeys.from_settings(settings)
    found = set()
    if client.zscore(keys.working_active(), f"{tenant}\x1f{user}") is not None:
        found.add("active")
    if client.sismember(keys.access_pending(), f"{tenant}|{user}"):
        found.add("pending")
    return found


@pytest.fixture
def other_tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_user_tables_cover_every_tenant_table_with_a_user() -> None:
    tables = user_tables()
    expected = {m.__table__ for m in TENANT_TABLES if "user_id" in m.__table__.c}
    assert set(tables) == expected
    order = [t.fullname for t in tables]
    for child, parent in [
        ("conceptual.mentions", "semantic.memories"),
        ("conceptual.relations", "conceptual.entities"),
        ("conceptual.associations", "semantic.memories"),
        ("episodic.turns", "episodic.sessions"),
        ("semantic.memories", "episodic.sessions"),
    ]:
        assert order.index(child) < order.index(parent)


def test_forget_removes_one_user_everywhere_and_nobody_else(
    settings: Settings, redis_client: redis.Redis, tenant: str, other_tenant: str
) -> None:
    people = [(tenant, "alice"), (tenant, "bob"), (other_tenant, "alice")]
    before = {p: populate_sql(*p) for p in people}
    for p in people:
        populate_redis(redis_client, settings, *p)
    keys_before = {p: user_keys(redis_client, settings, *p) for p in people}
    for p in people:
        # Every table holds rows for everyone, so a missed table would show below.
        assert all(count > 0 for count in before[p].values()), before[p]
        assert memberships(redis_client, settings, *p) == {"active", "pending"}
        assert len(keys_before[p]) >= 5

    report = forget_user(tenant_id=tenant, user_id="alice", settings=settings, client=redis_client)

    assert report.rows == before[(tenant, "alice")]
    assert report.redis_keys == len(keys_before[(tenant, "alice")])
    assert report.total == sum(report.rows.values()) + report.redis_keys
    assert all(count == 0 for count in row_counts(tenant, "alice").values())
    assert user_keys(redis_client, settings, tenant, "alice") == set()
    assert memberships(redis_client, settings, tenant, "alice") == set()
    for p in [(tenant, "bob"), (other_tenant, "alice")]:
        assert row_counts(*p) == before[p]
        assert user_keys(redis_client, settings, *p) == keys_before[p]
        assert memberships(redis_client, settings, *p) == {"active", "pending"}
    assert WorkingMemoryStore(redis_client, settings).read(tenant, "alice") is None
    assert WorkingMemoryStore(redis_client, settings).read(tenant, "bob") is not None

    again = forget_user(tenant_id=tenant, user_id="alice", settings=settings, client=redis_client)
    assert again.rows == {name: 0 for name in before[(tenant, "alice")]}
    assert again.redis_keys == 0
    assert again.total == 0


def test_a_failed_transaction_deletes_nothing(
    settings: Settings,
    redis_client: redis.Redis,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = populate_sql(tenant, "carol")
    populate_redis(redis_client, settings, tenant, "carol")
    keys_before = user_keys(redis_client, settings, tenant, "carol")
    missing = Table(
        "no_such_table",
        MetaData(),
        Column("tenant_id", String),
        Column("user_id", String),
        schema="meta",
    )
    tables = user_tables()
    monkeypatch.setattr(forget_module, "user_tables", lambda: [*tables, missing])

    with pytest.raises(Exception, match="no_such_table"):
        forget_user(tenant_id=tenant, user_id="carol", settings=settings, client=redis_client)

    assert row_counts(tenant, "carol") == before
    assert user_keys(redis_client, settings, tenant, "carol") == keys_before
    assert memberships(redis_client, settings, tenant, "carol") == {"active", "pending"}
