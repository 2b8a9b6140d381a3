"""Background cognition: decay bookkeeping, consolidated members, association origins, dream
replays, job runs

Revision ID: 3c9a6e2f51b8
Revises: 7b31c0e4a2d9
Create Date: 2026-11-23 14:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.config import get_settings

APP_ROLE = get_settings().app_role
TENANT_PREDICATE = "tenant_id = current_setting('engram.tenant_id', true)"

DROP_EDGES_FUNCTION = """
CREATE FUNCTION conceptual.drop_edges_of_deleted_memories() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM conceptual.associations AS e
    WHERE e.memory_a IN (SELECT id FROM gone) OR e.memory_b IN (SELECT id FROM gone);
    RETURN NULL;
END
$$
"""
SEARCH_TSV_FUNCTION = """
CREATE FUNCTION semantic.memories_search_tsv() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.search_tsv := to_tsvector('english'::regconfig, NEW.content);
    RETURN NEW;
END
$$
"""

revision: str = "3c9a6e2f51b8"
down_revision: str | None = "7b31c0e4a2d9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _tenant_table(qualified: str) -> None:
    op.execute(f"ALTER TABLE {qualified} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {qualified} FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {qualified} "
        f"USING ({TENANT_PREDICATE}) WITH CHECK ({TENANT_PREDICATE})"
    )
    op.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON {qualified} TO "{APP_ROLE}"')


def upgrade() -> None:
    op.add_column(
        "memories",
        sa.Column("decayed_at", sa.DateTime(timezone=True), nullable=True),
        schema="semantic",
    )
    op.add_column(
        "memories",
        sa.Column(
            "member_ids",
            postgresql.ARRAY(sa.Uuid()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        schema="semantic",
    )
    op.add_column(
        "associations",
        sa.Column("origin", sa.String(length=16), server_default="hebbian", nullable=False),
        schema="conceptual",
    )
    # Edges are written in batches of 100,000 co-activations; the foreign-key checks (a locked
    # lookup per end of each new edge) were 44 % of that. Writers take their ids from the
    # user's live memories; deleting memories removes their edges through one statement-level
    # trigger instead of the per-row cascade (it runs as the deleting role, under its RLS).
    for end in ("memory_a", "memory_b"):
        op.drop_constraint(
            f"fk_associations_{end}_memories",
            "associations",
            schema="conceptual",
            type_="foreignkey",
        )
    op.execute(DROP_EDGES_FUNCTION)
    op.execute(
        "CREATE TRIGGER memories_drop_edges AFTER DELETE ON semantic.memories"
        " REFERENCING OLD TABLE AS gone FOR EACH STATEMENT"
        " EXECUTE FUNCTION conceptual.drop_edges_of_deleted_memories()"
    )

    # Decay rewrites importance on every live memory each pass, a page range at a time: with
    # importance in no index and half of each page left free, every one of those updates is
    # HOT (no index entries, no index bloat): 1M rows measured at ~100k rows/s all HOT with
    # fillfactor 50, against ~8k rows/s with 70 (room for ~40 %) and the indexes below. The
    # user filter is served by ix_memories_tenant_user_occurred; no query used the trigram
    # index on content (near-duplicate checks compare a few candidate rows directly).
    op.drop_index("ix_memories_tenant_user_importance", table_name="memories", schema="semantic")
    op.drop_index("ix_memories_content_trgm", table_name="memories", schema="semantic")
    op.execute("ALTER TABLE semantic.memories SET (fillfactor = 50)")
    # A stored generated column is recomputed by every UPDATE of its row (to_tsvector on each
    # decayed memory, 2.5x the cost of the update itself here): keep the value, and let a
    # trigger recompute it when the content is written instead.
    op.execute("ALTER TABLE semantic.memories ALTER COLUMN search_tsv DROP EXPRESSION")
    op.execute(SEARCH_TSV_FUNCTION)
    op.execute(
        "CREATE TRIGGER memories_search_tsv BEFORE INSERT OR UPDATE OF content"
        " ON semantic.memories FOR EACH ROW EXECUTE FUNCTION semantic.memories_search_tsv()"
    )
    # "How many memories since the last refresh" and "which closed sessions lack a summary"
    # are asked every few minutes; neither should scan its table.
    op.create_index(
        "ix_memories_created_at", "memories", ["created_at"], unique=False, schema="semantic"
    )
    op.create_index(
        "ix_sessions_unsummarised",
        "sessions",
        ["tenant_id", "id"],
        unique=False,
        schema="episodic",
        postgresql_where=sa.text("closed_at IS NOT NULL AND summary IS NULL"),
    )

    op.create_table(
        "replays",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("cycle_id", sa.Uuid(), nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=False),
        sa.Column("priority", sa.Float(), server_default="0", nullable=False),
        sa.Column(
            "replayed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["memory_id"],
            ["semantic.memories.id"],
            name=op.f("fk_replays_memory_id_memories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("cycle_id", "memory_id", name=op.f("pk_replays")),
        schema="semantic",
    )
    op.create_index(
        "ix_replays_tenant_user_replayed",
        "replays",
        ["tenant_id", "user_id", "replayed_at"],
        unique=False,
        schema="semantic",
    )
    _tenant_table("semantic.replays")

    op.create_table(
        "job_runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("job", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=256), server_default="", nullable=False),
        sa.Column("tick", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=16), server_default="running", nullable=False),
        sa.Column("rows", sa.Integer(), server_default="0", nullable=False),
        sa.Column("errors", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_runs")),
        schema="meta",
    )
    op.create_index(
        "ix_job_runs_job_started", "job_runs", ["job", "started_at"], unique=False, schema="meta"
    )
    op.create_index(
        "ix_job_runs_tenant_started",
        "job_runs",
        ["tenant_id", "started_at"],
        unique=False,
        schema="meta",
    )
    _tenant_table("meta.job_runs")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS memories_search_tsv ON semantic.memories")
    op.execute("DROP FUNCTION IF EXISTS semantic.memories_search_tsv()")
    op.execute("ALTER TABLE semantic.memories DROP COLUMN search_tsv")
    op.execute(
        "ALTER TABLE semantic.memories ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS"
        " (to_tsvector('english'::regconfig, content)) STORED"
    )
    op.execute(
        "CREATE INDEX ix_memories_search_tsv ON semantic.memories"
        " USING gin (tenant_id, user_id, search_tsv)"
    )
    op.execute("ALTER TABLE semantic.memories RESET (fillfactor)")
    op.create_index(
        "ix_memories_content_trgm",
        "memories",
        ["content"],
        unique=False,
        schema="semantic",
        postgresql_using="gin",
        postgresql_ops={"content": "gin_trgm_ops"},
    )
    op.create_index(
        "ix_memories_tenant_user_importance",
        "memories",
        ["tenant_id", "user_id", "importance"],
        unique=False,
        schema="semantic",
    )
    op.drop_table("job_runs", schema="meta")
    op.drop_table("replays", schema="semantic")
    op.drop_index("ix_sessions_unsummarised", table_name="sessions", schema="episodic")
    op.drop_index("ix_memories_created_at", table_name="memories", schema="semantic")
    op.execute("DROP TRIGGER IF EXISTS memories_drop_edges ON semantic.memories")
    op.execute("DROP FUNCTION IF EXISTS conceptual.drop_edges_of_deleted_memories()")
    for end in ("memory_a", "memory_b"):
        op.create_foreign_key(
            f"fk_associations_{end}_memories",
            "associations",
            "memories",
            [end],
            ["id"],
            source_schema="conceptual",
            referent_schema="semantic",
            ondelete="CASCADE",
        )
    op.drop_column("associations", "origin", schema="conceptual")
    op.drop_column("memories", "member_ids", schema="semantic")
    op.drop_column("memories", "decayed_at", schema="semantic")
