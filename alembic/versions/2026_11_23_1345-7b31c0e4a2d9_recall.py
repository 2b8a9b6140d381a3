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
    op.create_index(
        "ix_memories_search_tsv",
        "memories",
        ["search_tsv"],
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
        [sa.text("to_tsvector('english'::regconfig, content)")],
        unique=False,
        schema="episodic",
        postgresql_using="gin",
    )

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
