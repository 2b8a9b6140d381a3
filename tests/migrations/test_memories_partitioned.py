"""The memories_partitioned revision converts a database holding memories: every row
survives byte for byte in the partition of its (tenant, user), the references into memories
name the user and still cascade, each partition keeps the table's storage (fillfactor 50, the
vector in the row), the app role reads only its tenant through the parent, and the downgrade
gives the rows back to a plain table."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, text

from app.config import Settings
from app.db.migrate import downgrade, upgrade
from app.db.session import unit_of_work
from tests.migrations.test_tenant_keys_and_partitions import Scratch, _keys, scratch_database

BEFORE = "b8d4f2a6c913"
REVISION = "c3f1e8a2d5b7"
OWNERS = (("ta", "alice"), ("ta", "bob"), ("tb", "alice"))
REFERENCES = (
    "semantic.memories fk_memories_superseded_by_memories",
    "semantic.replays fk_replays_memory_id_memories",
    "conceptual.mentions fk_mentions_memory_id_memories",
    "conceptual.relations fk_relations_memory_id_memories",
)


@pytest.fixture
def scratch(base_settings: Settings) -> Iterator[Scratch]:
    """A database of its own at the revision before, holding memories of two tenants."""
    with scratch_database(base_settings, "memories_partitioned", BEFORE, _fill) as database:
        yield database


IDS: dict[str, uuid.UUID] = {}


def _fill(conn: Connection) -> None:
    """Five memories of each owner (a vector, a version chain), and alice's graph rows."""
    for tenant, user in OWNERS:
        for n in range(5):
            key = f"{tenant}-{user}-{n}"
            IDS[key] = uuid.uuid4()
            conn.execute(
                text(
                    "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
                    " content_hash, occurred_at, valid_from, superseded_by, embedding)"
                    " VALUES (:id, :t, :u, 'fact', :c, :h, now(), now(), :sup,"
                    " CAST(:v AS vector))"
                ),
                {
                    "id": IDS[key],
                    "t": tenant,
                    "u": user,
                    "c": f"{user} in {tenant} remembers {n}",
                    "h": key,
                    "sup": IDS.get(f"{tenant}-{user}-{n - 1}") if n else None,
                    "v": "[" + ",".join(["0.05"] * 384) + "]",
                },
            )
    memory = IDS["ta-alice-0"]
    for key in ("e1", "e2"):
        IDS[key] = uuid.uuid4()
        conn.execute(
            text(
                "INSERT INTO conceptual.entities (id, tenant_id, user_id, name, canonical_name)"
                " VALUES (:id, 'ta', 'alice', :n, :n)"
            ),
            {"id": IDS[key], "n": key},
        )
    conn.execute(
        text(
            "INSERT INTO conceptual.relations (id, tenant_id, user_id, source_entity_id,"
            " target_entity_id, relation_type, memory_id) VALUES (gen_random_uuid(), 'ta',"
            " 'alice', :a, :b, 'near', :m)"
        ),
        {"a": IDS["e1"], "b": IDS["e2"], "m": memory},
    )
    conn.execute(
        text(
            "INSERT INTO conceptual.mentions (id, tenant_id, user_id, entity_id, memory_id,"
            " surface) VALUES (gen_random_uuid(), 'ta', 'alice', :e, :m, 'e1')"
        ),
        {"e": IDS["e1"], "m": memory},
    )
    conn.execute(
        text(
            "INSERT INTO semantic.replays (tenant_id, user_id, cycle_id, memory_id)"
            " VALUES ('ta', 'alice', gen_random_uuid(), :m)"
        ),
        {"m": memory},
    )


def _rows(conn: Connection) -> Any:
    return conn.execute(
        text(
            "SELECT count(*), md5(string_agg(CAST(r AS text), '|' ORDER BY r.id))"
            " FROM semantic.memories AS r"
        )
    ).one()


def _kind(conn: Connection) -> str:
    return str(
        conn.scalar(text("SELECT relkind FROM pg_class WHERE oid = 'semantic.memories'::regclass"))
    )


def test_upgrade_keeps_every_row_in_its_users_partition_and_downgrade_gives_them_back(
    scratch: Scratch,
) -> None:
    with scratch.owner.connect() as conn:
        before = _rows(conn)
        assert _kind(conn) == "r"
    upgrade(scratch.url, REVISION)
    with scratch.owner.connect() as conn:
        assert _rows(conn) == before
        assert _kind(conn) == "p"
        parts = conn.execute(
            text(
                "SELECT c.relname, c.reloptions, a.attstorage FROM pg_inherits AS i"
                " JOIN pg_class AS c ON c.oid = i.inhrelid JOIN pg_attribute AS a"
                " ON a.attrelid = c.oid AND a.attname = 'embedding'"
                " WHERE i.inhparent = 'semantic.memories'::regclass ORDER BY c.relname"
            )
        ).all()
        assert [p.relname for p in parts] == [f"memories_p{n:02d}" for n in range(16)]
        for part in parts:
            assert {"fillfactor=50", "toast_tuple_target=8160"} <= set(part.reloptions), part
            assert part.attstorage == "p", part  # PLAIN: the vector stays in the row
        # A user's memories are in one partition.
        homes = conn.execute(
            text(
                "SELECT count(DISTINCT tableoid) FROM semantic.memories GROUP BY tenant_id, user_id"
            )
        ).scalars()
        assert set(homes) == {1}
        keys = _keys(conn, "pf")
        assert keys["semantic.memories pk_memories"] == ["id", "tenant_id", "user_id"]
        for name in REFERENCES:
            assert keys[name][1:] == ["tenant_id", "user_id"], name

    with unit_of_work("ta", engine=scratch.app) as session:
        assert session.scalar(text("SELECT count(*) FROM semantic.memories")) == 10
        session.execute(
            text("DELETE FROM semantic.memories WHERE id = :m"), {"m": IDS["ta-alice-0"]}
        )
        left = session.execute(
            text(
                "SELECT (SELECT count(*) FROM conceptual.mentions),"
                " (SELECT count(*) FROM semantic.replays),"
                " (SELECT count(*) FROM conceptual.relations WHERE memory_id IS NULL),"
                " (SELECT superseded_by FROM semantic.memories WHERE id = :next)"
            ),
            {"next": IDS["ta-alice-1"]},
        ).one()
        assert tuple(left) == (0, 0, 1, None)
        session.rollback()

    downgrade(scratch.url, BEFORE)
    with scratch.owner.connect() as conn:
        assert _rows(conn) == before
        assert _kind(conn) == "r"
        keys = _keys(conn, "pf")
        assert keys["semantic.memories pk_memories"] == ["id", "tenant_id"]
        for name in REFERENCES:
            assert keys[name][1:] == ["tenant_id"], name
