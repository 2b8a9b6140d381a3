"""The tenant_keys_and_partitions revision converts a database holding rows: every row of the
three partitioned tables survives byte for byte (and lands in the partition it belongs to),
every key and foreign key carries the tenant, row-level security, grants and triggers come
back on the new tables, and the downgrade gives the rows back to plain tables.

A throwaway database of its own is migrated to the revision before, filled as the owner,
upgraded, checked as the application role, and downgraded. The day partitions' upkeep
(app/db/partitions.py) is exercised on the same database.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import NullPool

from app.config import Settings
from app.db import partitions
from app.db.bootstrap import drop_database, resolve_urls
from app.db.migrate import downgrade, upgrade
from app.db.session import unit_of_work
from app.layers.episodic.retention import EVENT_PARTITIONS

BEFORE = "e4b9c6d2a8f1"
REVISION = "f5a0d3c8e2b4"
PARTITIONED = ("episodic.turns", "episodic.events", "meta.access_patterns")
TENANT_TABLES = (
    "working.summaries",
    "episodic.sessions",
    "semantic.memories",
    "semantic.extraction_batches",
    "semantic.replays",
    "conceptual.entities",
    "conceptual.relations",
    "conceptual.mentions",
    "conceptual.associations",
    "meta.procedures",
    "meta.job_runs",
    *PARTITIONED,
)
# Replicated to every node under a distributed Postgres, so no tenant in their keys.
REFERENCE_TABLES = ("meta.tenants", "meta.api_keys")
NOW = datetime.now(UTC)


@dataclass(frozen=True)
class Scratch:
    url: str
    owner: Engine
    app: Engine
    app_role: str


@contextmanager
def scratch_database(
    base_settings: Settings, suffix: str, revision: str, fill: Callable[[Connection], None]
) -> Iterator[Scratch]:
    """A database of its own at `revision`, filled as the owner, dropped afterwards."""
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    name = f"{base_settings.database_name}_{suffix}"
    drop_database(name, base_settings)
    urls = resolve_urls(base_settings.model_copy(update={"database_name": name}))
    owner = create_engine(urls.owner, poolclass=NullPool)
    app = create_engine(urls.app, poolclass=NullPool)
    upgrade(urls.owner, revision)
    with owner.begin() as conn:
        fill(conn)
    try:
        yield Scratch(urls.owner, owner, app, base_settings.app_role)
    finally:
        owner.dispose()
        app.dispose()
        drop_database(name, base_settings)


@pytest.fixture
def scratch(base_settings: Settings) -> Iterator[Scratch]:
    """A database of its own at the revision before, holding rows of two tenants."""
    with scratch_database(base_settings, "tenant_keys", BEFORE, _fill) as database:
        yield database


IDS = {
    name: uuid.uuid4()
    for name in ("s1", "s2", "s3", "m1", "m2", "e1", "e2", "rel", "men", "batch", "cycle")
}


def _fill(conn: Connection) -> None:
    """Rows of two tenants in every table the revision changes, as the owner."""
    run = conn.execute
    for key, tenant, user in (("s1", "ta", "alice"), ("s2", "ta", "bob"), ("s3", "tb", "alice")):
        run(
            text(
                "INSERT INTO episodic.sessions (id, tenant_id, user_id, started_at, last_turn_at)"
                " VALUES (:id, :t, :u, :at, :at)"
            ),
            {"id": IDS[key], "t": tenant, "u": user, "at": NOW - timedelta(hours=2)},
        )
        run(
            text(
                "INSERT INTO episodic.turns (id, tenant_id, user_id, session_id, external_id,"
                " role, speaker, content, channel, occurred_at, token_count, metadata, topics)"
                " SELECT gen_random_uuid(), :t, :u, CAST(:s AS uuid), CAST(:s AS text) || '-' || n,"
                " 'user',"
                " CASE WHEN n % 2 = 0 THEN 'Ana' END, 'we talk about lisbon, turn ' || n, 'web',"
                " :at + n * interval '1 minute', 6, jsonb_build_object('n', n), '[\"trip\"]'"
                " FROM generate_series(1, 10) AS n"
            ),
            {"t": tenant, "u": user, "s": str(IDS[key]), "at": NOW - timedelta(hours=2)},
        )
    for at in (NOW - timedelta(days=1), NOW + timedelta(days=3), NOW - timedelta(days=400)):
        _event(conn, "ta", at)
    _event(conn, "ta", NOW + timedelta(days=100))
    _event(conn, "tb", NOW - timedelta(days=2))
    for at in (NOW - timedelta(hours=1), NOW - timedelta(days=30)):
        run(
            text(
                "INSERT INTO meta.access_patterns (id, tenant_id, user_id, query, query_hash,"
                " hour_of_day, created_at) VALUES (gen_random_uuid(), 'ta', 'alice', 'lisbon',"
                " 'h', 9, :at)"
            ),
            {"at": at},
        )
    turn = run(
        text("SELECT id FROM episodic.turns WHERE tenant_id = 'ta' AND user_id = 'alice' LIMIT 1")
    ).scalar_one()
    IDS["turn"] = turn
    for key, superseded in (("m1", None), ("m2", IDS["m1"])):
        run(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
                " content_hash, occurred_at, valid_from, session_id, superseded_by,"
                " source_turn_ids) VALUES (:id, 'ta', 'alice', 'fact', :c, :h, now(), now(),"
                " :s, :sup, ARRAY[CAST(:turn AS uuid)])"
            ),
            {"id": IDS[key], "c": key, "h": key, "s": IDS["s1"], "sup": superseded, "turn": turn},
        )
    for key in ("e1", "e2"):
        run(
            text(
                "INSERT INTO conceptual.entities (id, tenant_id, user_id, name, canonical_name)"
                " VALUES (:id, 'ta', 'alice', :n, :n)"
            ),
            {"id": IDS[key], "n": key},
        )
    run(
        text(
            "INSERT INTO conceptual.relations (id, tenant_id, user_id, source_entity_id,"
            " target_entity_id, relation_type, memory_id, turn_id)"
            " VALUES (:id, 'ta', 'alice', :a, :b, 'near', :m, :turn)"
        ),
        {"id": IDS["rel"], "a": IDS["e1"], "b": IDS["e2"], "m": IDS["m1"], "turn": turn},
    )
    run(
        text(
            "INSERT INTO conceptual.mentions (id, tenant_id, user_id, entity_id, memory_id,"
            " turn_id, surface) VALUES (:id, 'ta', 'alice', :e, :m, :turn, 'e1')"
        ),
        {"id": IDS["men"], "e": IDS["e1"], "m": IDS["m1"], "turn": turn},
    )
    a, b = sorted((IDS["m1"], IDS["m2"]))
    run(
        text(
            "INSERT INTO conceptual.associations (tenant_id, user_id, memory_a, memory_b,"
            " weight) VALUES ('ta', 'alice', :a, :b, 0.5)"
        ),
        {"a": a, "b": b},
    )
    run(
        text(
            "INSERT INTO semantic.replays (tenant_id, user_id, cycle_id, memory_id)"
            " VALUES ('ta', 'alice', :c, :m)"
        ),
        {"c": IDS["cycle"], "m": IDS["m1"]},
    )
    run(
        text(
            "INSERT INTO semantic.extraction_batches (id, tenant_id, user_id, trigger)"
            " VALUES (:id, 'ta', 'alice', 'count')"
        ),
        {"id": IDS["batch"]},
    )
    run(
        text(
            "INSERT INTO meta.procedures (id, tenant_id, user_id, query_pattern, pattern_hash,"
            " tool_sequence, sequence_hash) VALUES (gen_random_uuid(), 'ta', 'alice', 'q', 'p',"
            " '[]', 's')"
        )
    )
    run(
        text("INSERT INTO meta.job_runs (id, tenant_id, job) VALUES (gen_random_uuid(), 'ta', 'x')")
    )
    run(text("INSERT INTO working.summaries (tenant_id, user_id) VALUES ('ta', 'alice')"))


def _event(conn: Connection, tenant: str, at: datetime) -> None:
    conn.execute(
        text(
            "INSERT INTO episodic.events (id, tenant_id, user_id, type, known_type, occurred_at,"
            " payload) VALUES (gen_random_uuid(), :t, 'alice', 'typing_start', true, :at,"
            " jsonb_build_object('at', CAST(:at AS text)))"
        ),
        {"t": tenant, "at": at},
    )


def _fingerprints(conn: Connection) -> dict[str, Any]:
    """Row count of every changed table and a digest of every row of the rebuilt ones."""
    prints: dict[str, Any] = {
        table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
        for table in TENANT_TABLES
    }
    for table in PARTITIONED:
        prints[f"{table} rows"] = conn.execute(
            text(f"SELECT md5(string_agg(CAST(r AS text), '|' ORDER BY r.id)) FROM {table} AS r")
        ).scalar_one()
    return prints


def _kinds(conn: Connection) -> set[str]:
    """The relkinds of the three tables the revision partitions."""
    return set(
        conn.execute(
            text("SELECT relkind FROM pg_class WHERE oid = ANY(CAST(:t AS regclass[]))"),
            {"t": list(PARTITIONED)},
        ).scalars()
    )


def _keys(conn: Connection, kinds: str) -> dict[str, list[str]]:
    """constraint → its columns, for the layer tables' own constraints of these kinds."""
    rows = conn.execute(
        text(
            "SELECT c.conrelid::regclass::text || ' ' || c.conname,"
            " ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(n, i)"
            "  JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = k.n"
            "  ORDER BY k.i)"
            " FROM pg_constraint AS c JOIN pg_class AS r ON r.oid = c.conrelid"
            " WHERE c.contype = ANY(CAST(:kinds AS char[])) AND c.conparentid = 0"
            " AND NOT r.relispartition AND r.relnamespace::regnamespace::text"
            " IN ('working', 'episodic', 'semantic', 'conceptual', 'meta')"
        ),
        {"kinds": list(kinds)},
    ).all()
    return {name: list(columns) for name, columns in rows}


def test_upgrade_keeps_every_row_and_puts_the_tenant_in_every_key(scratch: Scratch) -> None:
    with scratch.owner.connect() as conn:
        before = _fingerprints(conn)
    upgrade(scratch.url, REVISION)

    with scratch.owner.connect() as conn:
        assert _fingerprints(conn) == before
        assert _kinds(conn) == {"p"}
        homes = dict(
            conn.execute(
                text(
                    "SELECT payload->>'at', tableoid::regclass::text FROM episodic.events"
                    " WHERE tenant_id = 'ta'"
                )
            ).all()
        )
        assert sorted(homes.values()) == sorted(
            [
                EVENT_PARTITIONS.partition((NOW - timedelta(days=1)).date()),
                EVENT_PARTITIONS.partition((NOW + timedelta(days=3)).date()),
                EVENT_PARTITIONS.default,  # 400 days back: before the retention window
                EVENT_PARTITIONS.default,  # 100 days ahead: past the week made ahead
            ]
        )
        assert conn.scalar(
            text("SELECT count(DISTINCT tableoid) FROM episodic.turns")
        ) == conn.scalar(text("SELECT count(DISTINCT (tenant_id, user_id)) FROM episodic.turns"))

        for name, columns in _keys(conn, "pu").items():
            table = name.split()[0]
            if table in REFERENCE_TABLES:
                continue
            assert "tenant_id" in columns, name
        foreign = _keys(conn, "f")
        assert len(foreign) == 11
        for name, columns in foreign.items():
            assert "tenant_id" in columns, name
            if name.endswith("_turn_id_turns"):  # into the trace, partitioned by user
                assert "user_id" in columns, name

        rls = conn.execute(
            text(
                "SELECT c.oid::regclass::text, c.relrowsecurity, c.relforcerowsecurity,"
                " (SELECT count(*) FROM pg_policy AS p WHERE p.polrelid = c.oid),"
                " has_table_privilege(:role, c.oid, 'SELECT, INSERT, UPDATE, DELETE')"
                " FROM pg_class AS c WHERE c.relkind = 'p'"
                " AND c.relnamespace::regnamespace::text IN ('episodic', 'meta')"
            ),
            {"role": scratch.app_role},
        ).all()
        assert sorted(rls) == sorted((t, True, True, 1, True) for t in PARTITIONED)
        # The partitions themselves are the owner's alone: the app reads them only through
        # the parent, where the policy applies.
        assert not conn.scalar(
            text(
                "SELECT bool_or(has_table_privilege(:role, i.inhrelid, 'SELECT'))"
                " FROM pg_inherits AS i WHERE i.inhparent = ANY(ARRAY["
                " 'episodic.turns'::regclass, 'episodic.events', 'meta.access_patterns'])"
            ),
            {"role": scratch.app_role},
        )


def test_after_the_upgrade_the_app_sees_its_tenant_and_the_trigger_runs(
    scratch: Scratch,
) -> None:
    upgrade(scratch.url, REVISION)
    app = scratch.app
    counts = "SELECT (SELECT count(*) FROM episodic.turns), (SELECT count(*) FROM episodic.events)"
    with unit_of_work("ta", engine=app) as session:
        assert tuple(session.execute(text(counts)).one()) == (20, 4)
        session.execute(
            text(
                "INSERT INTO episodic.turns (id, tenant_id, user_id, session_id, external_id,"
                " role, speaker, content, channel, occurred_at, token_count)"
                " VALUES (gen_random_uuid(), 'ta', 'alice', :s, 'new', 'user', 'Rui',"
                " 'the porto harbour at dusk', 'web', now(), 5)"
            ),
            {"s": IDS["s1"]},
        )
        found = session.execute(
            text(
                "SELECT count(*) FROM episodic.match_turns('alice',"
                " to_tsquery('english', 'harbour & rui'), 10, NULL, NULL, NULL)"
            )
        ).scalar_one()
        assert found == 1
        assert session.execute(text("SELECT count(*) FROM meta.hot_memories")).scalar_one() >= 0
    with unit_of_work("tb", engine=app) as session:
        assert tuple(session.execute(text(counts)).one()) == (10, 1)
    with unit_of_work(engine=app) as session:
        assert tuple(session.execute(text(counts)).one()) == (0, 0)
    with pytest.raises(DBAPIError, match="row-level security"), unit_of_work("tb", engine=app) as s:
        s.execute(
            text(
                "INSERT INTO episodic.events (id, tenant_id, user_id, type, known_type,"
                " occurred_at) VALUES (gen_random_uuid(), 'ta', 'x', 'y', true, now())"
            )
        )


def test_references_keep_their_tenant_when_what_they_point_at_goes(scratch: Scratch) -> None:
    upgrade(scratch.url, REVISION)
    with scratch.owner.begin() as conn:
        conn.execute(text("DELETE FROM episodic.turns WHERE id = :t"), {"t": IDS["turn"]})
        relation = conn.execute(
            text("SELECT tenant_id, turn_id, memory_id FROM conceptual.relations WHERE id = :r"),
            {"r": IDS["rel"]},
        ).one()
        assert tuple(relation) == ("ta", None, IDS["m1"])
        assert conn.scalar(text("SELECT count(*) FROM conceptual.mentions")) == 0  # cascaded
        conn.execute(text("DELETE FROM semantic.memories WHERE id = :m"), {"m": IDS["m1"]})
        survivor = conn.execute(
            text("SELECT tenant_id, superseded_by FROM semantic.memories WHERE id = :m"),
            {"m": IDS["m2"]},
        ).one()
        assert tuple(survivor) == ("ta", None)
        assert conn.scalar(text("SELECT count(*) FROM semantic.replays")) == 0


def test_day_partitions_are_made_ahead_fed_from_the_default_and_dropped_when_old(
    scratch: Scratch,
) -> None:
    upgrade(scratch.url, REVISION)
    owner = scratch.owner
    spec = EVENT_PARTITIONS
    later = NOW + timedelta(days=100)  # a day the default partition holds an event of
    keep_from = later - timedelta(days=2)
    sessions = sessionmaker(bind=owner)
    with sessions.begin() as session:
        todo = partitions.plan(session, spec, keep_from=keep_from, now=later)
    assert later.date() in todo.create
    assert spec.partition((NOW - timedelta(days=1)).date()) in todo.drop
    assert (later + timedelta(days=partitions.AHEAD_DAYS)).date() == max(todo.create)
    moved = 0
    for day in todo.create:
        with sessions.begin() as session:
            moved += partitions.create_partition(session, spec, day)
    for name in todo.drop:
        with sessions.begin() as session:
            partitions.drop_partition(session, spec, name)
    assert moved == 1
    with owner.connect() as conn:
        homes = conn.execute(
            text("SELECT tableoid::regclass::text FROM episodic.events ORDER BY occurred_at")
        ).scalars()
        # Every day partition the migration made lies before keep_from: the events in them
        # went with them; the far past stays in the default (row retention takes it).
        assert list(homes) == [spec.default, spec.partition(later.date())]
    with sessions.begin() as session:
        assert partitions.plan(session, spec, keep_from=keep_from, now=later).create == []
    with pytest.raises(ValueError, match="partition"), sessions.begin() as session:
        partitions.drop_partition(session, spec, spec.default)


def test_downgrade_gives_the_rows_back_to_plain_tables(scratch: Scratch) -> None:
    upgrade(scratch.url, REVISION)
    with scratch.owner.connect() as conn:
        before = _fingerprints(conn)
    downgrade(scratch.url, BEFORE)
    with scratch.owner.connect() as conn:
        assert _fingerprints(conn) == before
        assert _kinds(conn) == {"r"}
        keys = _keys(conn, "p")
        assert keys["episodic.turns pk_turns"] == ["id"]
        assert keys["semantic.memories pk_memories"] == ["id"]
        assert keys["conceptual.associations pk_associations"] == ["memory_a", "memory_b"]
        assert conn.scalar(
            text("SELECT relforcerowsecurity FROM pg_class WHERE oid = 'episodic.turns'::regclass")
        )
    upgrade(scratch.url)  # and up again
