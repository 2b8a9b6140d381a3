"""Recall: full-text search on memories and turns, memory channel, tenant API keys

Revision ID: 7b31c0e4a2d9
Revises: d58efeab390d
Create Date: 2026-11-23 13:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.config import get_settings

APP_ROLE = get_settings().app_role
TENANT_PREDICATE = "tenant_id = current_setting('engram.tenant_id', true)"

# Full-text matching under row-level security cannot use the GIN index: `@@` is not
# leakproof, so Postgres evaluates it only after the policy, row by row, over every row of
# the user. These functions run as the owner and apply the same tenant predicate as the
# policy themselves (no tenant setting, no rows), so `tenant_id, user_id, words` is one
# index probe. They return ids and vectors only; the caller reads rows under RLS.
MATCH_SIGNATURES = {
    "semantic.match_memories": "text, tsquery, integer, boolean, boolean, text, text[], text[],"
    " timestamptz, timestamptz, double precision, uuid[]",
    "episodic.match_turns": "text, tsquery, integer, text, timestamptz, timestamptz",
}
MATCH_MEMORIES = """
CREATE FUNCTION semantic.match_memories(
    p_user text, p_query tsquery, p_limit integer, p_superseded boolean, p_archived boolean,
    p_channel text, p_tags text[], p_kinds text[], p_since timestamptz, p_until timestamptz,
    p_min_importance double precision, p_exclude uuid[])
RETURNS TABLE (id uuid, v text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT m.id, CAST(m.search_tsv AS text) FROM semantic.memories AS m
    WHERE m.tenant_id = current_setting('engram.tenant_id', true) AND m.user_id = p_user
      AND m.search_tsv @@ p_query
      AND (p_archived OR m.archived_at IS NULL) AND (p_superseded OR m.valid_to IS NULL)
      AND (p_channel IS NULL OR m.channel = p_channel)
      AND (p_tags IS NULL OR m.tags && p_tags)
      AND (p_kinds IS NULL OR m.kind = ANY(p_kinds))
      AND (p_since IS NULL OR m.occurred_at >= p_since)
      AND (p_until IS NULL OR m.occurred_at < p_until)
      AND (p_min_importance IS NULL OR m.importance >= p_min_importance)
      AND (p_exclude IS NULL OR NOT (m.id = ANY(p_exclude)))
    ORDER BY ts_rank(m.search_tsv, p_query) DESC, m.id
    LIMIT p_limit
$$
"""
MATCH_TURNS = """
CREATE FUNCTION episodic.match_turns(
    p_user text, p_query tsquery, p_limit integer, p_channel text, p_since timestamptz,
    p_until timestamptz)
RETURNS TABLE (id uuid, v text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.id, CAST(to_tsvector('english'::regconfig, t.content) AS text)
    FROM episodic.turns AS t
    WHERE t.tenant_id = current_setting('engram.tenant_id', true) AND t.user_id = p_user
      AND to_tsvector('english'::regconfig, t.content) @@ p_query
      AND (p_channel IS NULL OR t.channel = p_channel)
      AND (p_since IS NULL OR t.occurred_at >= p_since)
      AND (p_until IS NULL OR t.occurred_at < p_until)
    ORDER BY ts_rank(to_tsvector('english'::regconfig, t.content), p_query) DESC, t.id
    LIMIT p_limit
$$
"""

revision: str = "7b31c0e4a2d9"
down_revision: str | None = "d58efeab390d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "memories", sa.Column("channel", sa.String(length=128), nullable=True), schema="semantic"
    )
    op.add_column(
        "memories",
        sa.Column(
            "search_tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english'::regconfig, content)", persisted=True),
            nullable=True,
        ),
        schema="semantic",
    )
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.create_index(
        "ix_memories_search_tsv",
        "memories",
        ["tenant_id", "user_id", "search_tsv"],
        unique=False,
        schema="semantic",
        postgresql_using="gin",
    )
    # Raw turns are searched by full text (stemmed words, BM25-ranked in Python); the trigram
    # index nothing queried goes, so ingest keeps paying for one GIN index on turns, not two.
    op.drop_index("ix_turns_content_trgm", table_name="turns", schema="episodic")
    op.create_index(
        "ix_turns_content_tsv",
        "turns",
        ["tenant_id", "user_id", sa.text("to_tsvector('english'::regconfig, content)")],
        unique=False,
        schema="episodic",
        postgresql_using="gin",
    )

    op.execute(MATCH_MEMORIES)
    op.execute(MATCH_TURNS)
    for function in ("semantic.match_memories", "episodic.match_turns"):
        signature = MATCH_SIGNATURES[function]
        op.execute(f"REVOKE ALL ON FUNCTION {function}({signature}) FROM PUBLIC")
        op.execute(f'GRANT EXECUTE ON FUNCTION {function}({signature}) TO "{APP_ROLE}"')

    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), server_default="", nullable=False),
        sa.Column("key_prefix", sa.String(length=32), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
        schema="meta",
    )
    op.execute("ALTER TABLE meta.api_keys ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE meta.api_keys FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON meta.api_keys "
        f"USING ({TENANT_PREDICATE}) WITH CHECK ({TENANT_PREDICATE})"
    )
    op.execute(f'GRANT SELECT ON meta.api_keys TO "{APP_ROLE}"')
    # The one cross-tenant read the request path needs: digest → tenant, for live keys only.
    # SECURITY DEFINER runs as the owner (who bypasses RLS); search_path is pinned against
    # hijacking, and the function reveals nothing but the tenant of a key the caller holds.
    op.execute(
        "CREATE FUNCTION meta.api_key_tenant(digest text) RETURNS text"
        " LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS"
        " $$ SELECT tenant_id FROM meta.api_keys WHERE key_hash = digest"
        " AND revoked_at IS NULL $$"
    )
    op.execute("REVOKE ALL ON FUNCTION meta.api_key_tenant(text) FROM PUBLIC")
    op.execute(f'GRANT EXECUTE ON FUNCTION meta.api_key_tenant(text) TO "{APP_ROLE}"')


def downgrade() -> None:
    for function, signature in MATCH_SIGNATURES.items():
        op.execute(f"DROP FUNCTION IF EXISTS {function}({signature})")
    op.execute("DROP FUNCTION IF EXISTS meta.api_key_tenant(text)")
    op.drop_table("api_keys", schema="meta")
    op.drop_index("ix_turns_content_tsv", table_name="turns", schema="episodic")
    op.create_index(
        "ix_turns_content_trgm",
        "turns",
        ["content"],
        unique=False,
        schema="episodic",
        postgresql_using="gin",
        postgresql_ops={"content": "gin_trgm_ops"},
    )
    op.drop_index("ix_memories_search_tsv", table_name="memories", schema="semantic")
    op.drop_column("memories", "search_tsv", schema="semantic")
    op.drop_column("memories", "channel", schema="semantic")
