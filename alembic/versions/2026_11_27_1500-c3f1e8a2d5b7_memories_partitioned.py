"""semantic.memories partitioned by HASH (tenant_id, user_id), like the trace

Every read of memories is one user's (the search legs, the context block, extraction's
near-duplicate checks, decay and dream per user), and a big user's reads grew with the whole
table: the exact sort of a user's memories reads about a heap page per row, scattered among
everyone's, and the filtered HNSW walk of one graph for the whole table visits other users'
rows and checks each. bench/scale.py put search p95 at 1M memories at 3.4-7x its p95 at 100k,
the largest users making the tail. Partitioned by (tenant, user) into 16, a user's rows and the
graph its walk visits are a sixteenth of the table's, and a big user holds a large share of
its partition's graph, so its walk finds its own rows in few steps (app/db/nearest.py sizes
the plan by the partition's rows).

A partitioned table's keys must hold its partition key, so the primary key becomes
(id, tenant_id, user_id) and the references into memories name the user too (a replay, a
mention, a relation and a superseding memory are always of the memory's own user; one that
is not would fail here, and none exists: they are written with the memory's user). The
conversion is the tenant-keys migration's: a partitioned copy with the same columns,
defaults, storage and checks, the rows moved in one INSERT ... SELECT, the names swapped,
then the keys, indexes, triggers, row-level security, policies and grants that the old table
had (read from the catalog, app/db/rebuild.py), and the hot-memories views that read it.
Each partition keeps the table's storage: fillfactor 50 (decay's HOT updates) and a TOAST
target of 8160 with the vector PLAIN (memory_vectors_inline). The downgrade converts back.

Revision ID: c3f1e8a2d5b7
Revises: b8d4f2a6c913
Create Date: 2026-11-27 15:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

from app.db.rebuild import carried, views_over

revision: str = "c3f1e8a2d5b7"
down_revision: str | None = "b8d4f2a6c913"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEMORIES = "semantic.memories"
PARTITIONS = 16
STORAGE = "fillfactor = 50, toast_tuple_target = 8160"
# The references into memories: (table, constraint, column, what a deletion does).
REFERENCES = (
    (MEMORIES, "fk_memories_superseded_by_memories", "superseded_by", "SET NULL (superseded_by)"),
    ("semantic.replays", "fk_replays_memory_id_memories", "memory_id", "CASCADE"),
    ("conceptual.mentions", "fk_mentions_memory_id_memories", "memory_id", "CASCADE"),
    (
        "conceptual.relations",
        "fk_relations_memory_id_memories",
        "memory_id",
        "SET NULL (memory_id)",
    ),
)
SESSION_REFERENCE = (
    "CONSTRAINT fk_memories_session_id_sessions FOREIGN KEY (session_id, tenant_id)"
    " REFERENCES episodic.sessions (id, tenant_id) ON DELETE SET NULL (session_id)"
)
CONTENT_KEY = (
    "CONSTRAINT uq_memories_tenant_id_user_id_content_hash"
    " UNIQUE (tenant_id, user_id, content_hash)"
)
HOT_VIEWS = ("meta.hot_memories", "meta.hot_memories_mv")


def _key(partitioned: bool) -> str:
    user = ", user_id" if partitioned else ""
    return f"CONSTRAINT pk_memories PRIMARY KEY (id, tenant_id{user})"


def _reference(table: str, name: str, column: str, on_delete: str, partitioned: bool) -> str:
    keys = f"{column}, tenant_id, user_id" if partitioned else f"{column}, tenant_id"
    target = "id, tenant_id, user_id" if partitioned else "id, tenant_id"
    return (
        f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({keys})"
        f" REFERENCES {MEMORIES} ({target}) ON DELETE {on_delete}"
    )


def _rebuild(partitioned: bool) -> None:
    """Replace semantic.memories by a copy, partitioned or plain, with everything it had."""
    conn = op.get_bind()
    view, matview = HOT_VIEWS
    remake = views_over(conn, view, matview)
    saved = carried(conn, MEMORIES)
    for table, name, _, _ in REFERENCES:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    staging = f"{MEMORIES}_new"
    shape = (
        f"CREATE TABLE {staging} (LIKE {MEMORIES} INCLUDING DEFAULTS INCLUDING STORAGE"
        " INCLUDING COMPRESSION INCLUDING CONSTRAINTS)"
    )
    if partitioned:
        op.execute(f"{shape} PARTITION BY HASH (tenant_id, user_id)")
        for n in range(PARTITIONS):
            op.execute(
                f"CREATE TABLE {MEMORIES}_p{n:02d} PARTITION OF {staging}"
                f" FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {n}) WITH ({STORAGE})"
            )
        # The parent's column storage reaches partitions made before it was set only so.
        op.execute(f"ALTER TABLE {staging} ALTER COLUMN embedding SET STORAGE PLAIN")
    else:
        op.execute(f"{shape} WITH ({STORAGE})")
    op.execute(f"INSERT INTO {staging} SELECT * FROM {MEMORIES}")
    op.execute(f"DROP VIEW {view}")
    op.execute(f"DROP MATERIALIZED VIEW {matview}")
    op.execute(f"DROP TABLE {MEMORIES}")
    op.execute(f"ALTER TABLE {staging} RENAME TO memories")
    op.execute(f"ALTER TABLE {MEMORIES} ADD {_key(partitioned)}, ADD {CONTENT_KEY}")
    op.execute(f"ALTER TABLE {MEMORIES} ADD {SESSION_REFERENCE}")
    for statement in saved:
        op.execute(statement)
    for table, name, column, on_delete in REFERENCES:
        op.execute(_reference(table, name, column, on_delete, partitioned))
    for statement in remake:
        op.execute(statement)
    op.execute(f"ANALYZE {MEMORIES}")


def upgrade() -> None:
    _rebuild(partitioned=True)


def downgrade() -> None:
    _rebuild(partitioned=False)
