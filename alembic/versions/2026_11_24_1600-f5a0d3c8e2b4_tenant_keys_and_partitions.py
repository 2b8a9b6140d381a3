"""the tenant in every key; the trace, raw events and access records partitioned

Two things, so that the schema can be spread over many Postgres nodes by tenant (Citus:
`create_distributed_table(..., 'tenant_id')`) without a rewrite, and so that the tables that
grow with every event stay cheap to read and to age out.

**Every primary and unique key carries the tenant**, and every foreign key between tenant
tables carries it too: a distributed table's keys must hold its distribution column, and a
foreign key between two of them must join on it. The tenant is appended to each existing key
(`(id)` becomes `(id, tenant_id)`): the id stays the leading column, so every lookup by id,
with or without the tenant, is still one index probe, and uniqueness is what it was (ids are
UUIDs). Foreign keys name the columns in the same order (`(session_id, tenant_id)` references
`sessions (id, tenant_id)`); the ones that unset a reference unset only that column
(`ON DELETE SET NULL (memory_id)`, Postgres 15+), never the tenant. meta.tenants and
meta.api_keys stay as they are: a distributed deployment replicates them to every node as
reference tables (an API key is resolved by its digest before the tenant is known, and the
digest must stay unique across tenants).

**Three tables are partitioned**, each by what its reads and its retention need:

- episodic.turns (the immutable trace, one row per message, never aged out) by
  HASH (tenant_id, user_id) into 16 partitions: every read of the trace is one user's (the
  search legs, total recall, extraction claims), and names the user, so it touches one
  partition and that partition's indexes — its HNSW graph is a sixteenth of the table's.
  Time would be the wrong key: a user's reads span all of their history, and nothing is
  dropped by age. 16 keeps each partition's indexes small at tens of millions of turns while
  a read that names no user (operator counts) stays a short append.
- episodic.events (typing, presence, sensors, tool runs; deleted after
  `event_retention_days`) by RANGE (occurred_at), one partition per UTC day plus a DEFAULT
  partition, so an insert never fails whatever its time. The retention job keeps partitions
  from the cutoff to a week ahead and drops the ones wholly past the cutoff
  (app/db/partitions.py); rows past the cutoff in the remaining partitions still go row by
  row, so the retention promise is exact.
- meta.access_patterns (one row per search; pruned after `access_retention_days`) the same
  way by RANGE (created_at): its readers ask for recent days (prefetch, hot memories).

semantic.memories, conceptual.mentions and semantic.replays are not partitioned: they grow
with extracted knowledge, not with every event (near-duplicates reinforce a memory instead of
adding one), memories are rewritten in place by decay (fillfactor and HOT updates tuned for
that), and their per-user indexes already serve one user's reads. Their tenant keys are what
distributing them needs.

The conversion is set-based: a partitioned copy of each table is made with the same columns,
the rows move in one INSERT … SELECT, the names swap, and then the keys, the indexes, the
row-level security policies, the grants and the triggers (episodic.turns_search_tsv) that the
old table had are recreated on the new one — read from the catalog, so whatever the previous
revision left is what comes back. The hot-memories views read meta.access_patterns, so they
are recreated too. Functions such as episodic.match_turns name the table in SQL text and
resolve it when called: they need nothing. The day partitions made here cover the retention
window to a week ahead, as the retention jobs keep them.

The downgrade converts the three tables back to plain ones (rows moved the same way) and
restores the keys without the tenant; it fails only if two tenants hold the same id, which
UUIDs rule out.

Revision ID: f5a0d3c8e2b4
Revises: e4b9c6d2a8f1
Create Date: 2026-11-24 16:00:00.000000
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from alembic import op

from app.config import get_settings
from app.db.rebuild import carried, views_over

revision: str = "f5a0d3c8e2b4"
down_revision: str | None = "e4b9c6d2a8f1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TURN_PARTITIONS = 16
AHEAD_DAYS = 7

# Primary keys of the plain tables: (table, constraint, key before, key after).
PRIMARY_KEYS = (
    ("episodic.sessions", "pk_sessions", "id", "id, tenant_id"),
    ("semantic.memories", "pk_memories", "id", "id, tenant_id"),
    ("semantic.extraction_batches", "pk_extraction_batches", "id", "id, tenant_id"),
    ("semantic.replays", "pk_replays", "cycle_id, memory_id", "cycle_id, memory_id, tenant_id"),
    ("conceptual.entities", "pk_entities", "id", "id, tenant_id"),
    ("conceptual.relations", "pk_relations", "id", "id, tenant_id"),
    ("conceptual.mentions", "pk_mentions", "id", "id, tenant_id"),
    (
        "conceptual.associations",
        "pk_associations",
        "memory_a, memory_b",
        "memory_a, memory_b, tenant_id",
    ),
    ("meta.procedures", "pk_procedures", "id", "id, tenant_id"),
    ("meta.job_runs", "pk_job_runs", "id", "id, tenant_id"),
)
# Unique keys that did not hold the tenant: (table, name before, key before, name, key after).
UNIQUE_KEYS = (
    (
        "conceptual.mentions",
        "uq_mentions_entity_id_memory_id",
        "entity_id, memory_id",
        "uq_mentions_entity_id_memory_id_tenant_id",
        "entity_id, memory_id, tenant_id",
    ),
)


@dataclass(frozen=True)
class ForeignKey:
    table: str
    name: str
    columns: str
    target: str
    target_columns: str
    on_delete: str

    def add(self) -> str:
        return (
            f"ALTER TABLE {self.table} ADD CONSTRAINT {self.name} FOREIGN KEY ({self.columns})"
            f" REFERENCES {self.target} ({self.target_columns}) ON DELETE {self.on_delete}"
        )


def _fk(table: str, column: str, target: str, on_delete: str) -> ForeignKey:
    name = f"fk_{table.split('.')[1]}_{column}_{target.split('.')[1]}"
    return ForeignKey(table, name, column, target, "id", on_delete)


def _tenant_fk(old: ForeignKey, *, user: bool = False) -> ForeignKey:
    """The same reference with the tenant (and the user, into the user-partitioned trace)."""
    extra = ", tenant_id, user_id" if user else ", tenant_id"
    on_delete = old.on_delete
    if on_delete == "SET NULL":
        on_delete = f"SET NULL ({old.columns})"
    return ForeignKey(
        old.table,
        old.name,
        old.columns + extra,
        old.target,
        old.target_columns + extra,
        on_delete,
    )


OLD_FOREIGN_KEYS = (
    _fk("episodic.turns", "session_id", "episodic.sessions", "CASCADE"),
    _fk("semantic.memories", "session_id", "episodic.sessions", "SET NULL"),
    _fk("semantic.memories", "superseded_by", "semantic.memories", "SET NULL"),
    _fk("semantic.replays", "memory_id", "semantic.memories", "CASCADE"),
    _fk("conceptual.mentions", "entity_id", "conceptual.entities", "CASCADE"),
    _fk("conceptual.mentions", "memory_id", "semantic.memories", "CASCADE"),
    _fk("conceptual.mentions", "turn_id", "episodic.turns", "CASCADE"),
    _fk("conceptual.relations", "memory_id", "semantic.memories", "SET NULL"),
    _fk("conceptual.relations", "source_entity_id", "conceptual.entities", "CASCADE"),
    _fk("conceptual.relations", "target_entity_id", "conceptual.entities", "CASCADE"),
    _fk("conceptual.relations", "turn_id", "episodic.turns", "SET NULL"),
)
NEW_FOREIGN_KEYS = tuple(
    _tenant_fk(fk, user=fk.target == "episodic.turns") for fk in OLD_FOREIGN_KEYS
)

# The partitioned tables: (table, partition key, its primary key, its unique keys).
TURNS = "episodic.turns"
EVENTS = "episodic.events"
ACCESS = "meta.access_patterns"
PARTITIONED_KEYS = {
    TURNS: (
        "HASH (tenant_id, user_id)",
        "CONSTRAINT pk_turns PRIMARY KEY (id, tenant_id, user_id)",
        "CONSTRAINT uq_turns_tenant_id_user_id_external_id UNIQUE (tenant_id, user_id, external_id)",
    ),
    EVENTS: (
        "RANGE (occurred_at)",
        "CONSTRAINT pk_events PRIMARY KEY (id, tenant_id, occurred_at)",
    ),
    ACCESS: (
        "RANGE (created_at)",
        "CONSTRAINT pk_access_patterns PRIMARY KEY (id, tenant_id, created_at)",
    ),
}
PLAIN_KEYS = {
    TURNS: (
        "CONSTRAINT pk_turns PRIMARY KEY (id)",
        "CONSTRAINT uq_turns_tenant_id_user_id_external_id UNIQUE (tenant_id, user_id, external_id)",
    ),
    EVENTS: ("CONSTRAINT pk_events PRIMARY KEY (id)",),
    ACCESS: ("CONSTRAINT pk_access_patterns PRIMARY KEY (id)",),
}
HOT_VIEWS = ("meta.hot_memories", "meta.hot_memories_mv")


def _rebuild(table: str, partitioned: bool) -> None:
    """Replace `table` by a copy with the same columns, partitioned or plain, and move the rows."""
    conn = op.get_bind()
    name = table.split(".")[1]
    saved = carried(conn, table)
    staging = f"{table}_new"
    keys = PARTITIONED_KEYS[table] if partitioned else ("", *PLAIN_KEYS[table])
    by = f" PARTITION BY {keys[0]}" if partitioned else ""
    op.execute(
        f"CREATE TABLE {staging} (LIKE {table}"
        f" INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION){by}"
    )
    if partitioned:
        for ddl in PARTITIONS[table](staging):
            op.execute(ddl)
    op.execute(f"INSERT INTO {staging} SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE {staging} RENAME TO {name}")
    for key in keys[1:]:
        op.execute(f"ALTER TABLE {table} ADD {key}")
    for statement in saved:
        op.execute(statement)
    op.execute(f"ANALYZE {table}")


def _turn_partitions(parent: str) -> list[str]:
    return [
        f"CREATE TABLE {TURNS}_p{n:02d} PARTITION OF {parent}"
        f" FOR VALUES WITH (MODULUS {TURN_PARTITIONS}, REMAINDER {n})"
        for n in range(TURN_PARTITIONS)
    ]


def _day_partitions(table: str, retention_days: float) -> Callable[[str], list[str]]:
    """One partition per UTC day from the retention cutoff to AHEAD_DAYS ahead, and DEFAULT."""

    def ddl(parent: str) -> list[str]:
        now = datetime.now(UTC)
        first = (now - timedelta(days=retention_days)).date()
        last = now.date() + timedelta(days=AHEAD_DAYS)
        days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        return [f"CREATE TABLE {table}_default PARTITION OF {parent} DEFAULT"] + [
            f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {parent}"
            f" FOR VALUES FROM ('{_start(day).isoformat()}')"
            f" TO ('{_start(day + timedelta(days=1)).isoformat()}')"
            for day in days
        ]

    return ddl


def _start(day: date) -> datetime:
    return datetime.combine(day, time.min, UTC)


PARTITIONS: dict[str, Callable[[str], list[str]]] = {
    TURNS: _turn_partitions,
    EVENTS: _day_partitions(EVENTS, get_settings().event_retention_days),
    ACCESS: _day_partitions(ACCESS, get_settings().access_retention_days),
}


def _rebuild_access_patterns(partitioned: bool) -> None:
    """meta.access_patterns with the hot-memories views that read it dropped and remade."""
    view, matview = HOT_VIEWS
    remake = views_over(op.get_bind(), view, matview)
    op.execute(f"DROP VIEW {view}")
    op.execute(f"DROP MATERIALIZED VIEW {matview}")
    _rebuild(ACCESS, partitioned)
    for statement in remake:
        op.execute(statement)


# References into the trace now name its user: one written with another user's turn (none
# should exist: extraction links a user's own turns) loses the turn rather than fail here.
UNLINK_FOREIGN_TURNS = (
    "UPDATE {table} AS x SET turn_id = NULL WHERE x.turn_id IS NOT NULL AND NOT EXISTS ("
    "SELECT 1 FROM episodic.turns AS t WHERE t.id = x.turn_id AND t.tenant_id = x.tenant_id"
    " AND t.user_id = x.user_id)"
)


def upgrade() -> None:
    for fk in OLD_FOREIGN_KEYS:
        op.execute(f"ALTER TABLE {fk.table} DROP CONSTRAINT {fk.name}")
    for table, name, _, after in PRIMARY_KEYS:
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {name}, ADD CONSTRAINT {name}"
            f" PRIMARY KEY ({after})"
        )
    for table, old, _, name, key in UNIQUE_KEYS:
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {old}, ADD CONSTRAINT {name} UNIQUE ({key})"
        )
    _rebuild(TURNS, partitioned=True)
    _rebuild(EVENTS, partitioned=True)
    _rebuild_access_patterns(partitioned=True)
    for table in ("conceptual.mentions", "conceptual.relations"):
        op.execute(UNLINK_FOREIGN_TURNS.format(table=table))
    for fk in NEW_FOREIGN_KEYS:
        op.execute(fk.add())


def downgrade() -> None:
    for fk in NEW_FOREIGN_KEYS:
        op.execute(f"ALTER TABLE {fk.table} DROP CONSTRAINT {fk.name}")
    _rebuild_access_patterns(partitioned=False)
    _rebuild(EVENTS, partitioned=False)
    _rebuild(TURNS, partitioned=False)
    for table, old, key, name, _ in UNIQUE_KEYS:
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {name}, ADD CONSTRAINT {old} UNIQUE ({key})"
        )
    for table, name, before, _ in PRIMARY_KEYS:
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {name}, ADD CONSTRAINT {name}"
            f" PRIMARY KEY ({before})"
        )
    for fk in OLD_FOREIGN_KEYS:
        op.execute(fk.add())
