"""Attention scores and extraction claims on turns; extraction batches; gem provenance

Revision ID: d58efeab390d
Revises: 5ca9046ef653
Create Date: 2026-11-23 09:46:23.042943
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.config import get_settings

APP_ROLE = get_settings().app_role
TENANT_PREDICATE = "tenant_id = current_setting('engram.tenant_id', true)"

revision: str = "d58efeab390d"
down_revision: str | None = "5ca9046ef653"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "extraction_batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), server_default="claimed", nullable=False),
        sa.Column("turn_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("gem_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "gems",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "state IN ('claimed', 'extracted', 'embedded', 'stored', 'failed')",
            name=op.f("ck_extraction_batches_state_known"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_extraction_batches")),
        schema="semantic",
    )
    op.create_index(
        "ix_extraction_batches_state_updated",
        "extraction_batches",
        ["state", "updated_at"],
        unique=False,
        schema="semantic",
    )
    op.execute("ALTER TABLE semantic.extraction_batches ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE semantic.extraction_batches FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON semantic.extraction_batches "
        f"USING ({TENANT_PREDICATE}) WITH CHECK ({TENANT_PREDICATE})"
    )
    op.execute(
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON semantic.extraction_batches TO "{APP_ROLE}"'
    )
    op.create_index(
        "ix_extraction_batches_tenant_user",
        "extraction_batches",
        ["tenant_id", "user_id"],
        unique=False,
        schema="semantic",
    )
    op.drop_index(op.f("ix_mentions_entity_id"), table_name="mentions", schema="conceptual")
    op.create_unique_constraint(
        op.f("uq_mentions_entity_id_memory_id"),
        "mentions",
        ["entity_id", "memory_id"],
        schema="conceptual",
    )
    op.add_column(
        "turns", sa.Column("emotional_intensity", sa.Float(), nullable=True), schema="episodic"
    )
    op.add_column(
        "turns", sa.Column("connection_relevance", sa.Float(), nullable=True), schema="episodic"
    )
    op.add_column("turns", sa.Column("novelty", sa.Float(), nullable=True), schema="episodic")
    op.add_column("turns", sa.Column("salience", sa.Float(), nullable=True), schema="episodic")
    op.add_column(
        "turns", sa.Column("attention", sa.String(length=16), nullable=True), schema="episodic"
    )
    op.add_column(
        "turns", sa.Column("extraction_batch_id", sa.Uuid(), nullable=True), schema="episodic"
    )
    op.create_index(
        "ix_turns_unscored",
        "turns",
        ["tenant_id", "user_id", "occurred_at"],
        unique=False,
        schema="episodic",
        postgresql_where=sa.text("salience IS NULL"),
    )
    op.create_index(
        "ix_turns_unextracted",
        "turns",
        ["tenant_id", "user_id", "occurred_at"],
        unique=False,
        schema="episodic",
        postgresql_where=sa.text("extraction_batch_id IS NULL"),
    )
    op.add_column(
        "memories",
        sa.Column("original", sa.Text(), server_default="", nullable=False),
        schema="semantic",
    )
    op.add_column("memories", sa.Column("subject", sa.Text(), nullable=True), schema="semantic")
    op.add_column("memories", sa.Column("value", sa.Text(), nullable=True), schema="semantic")
    op.add_column(
        "memories",
        sa.Column("extractor", sa.String(length=64), server_default="", nullable=False),
        schema="semantic",
    )
    op.add_column(
        "memories", sa.Column("extraction_batch_id", sa.Uuid(), nullable=True), schema="semantic"
    )
    op.add_column(
        "memories",
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        schema="semantic",
    )
    op.create_index(
        "ix_memories_current_subject",
        "memories",
        ["tenant_id", "user_id", "subject"],
        unique=False,
        schema="semantic",
        postgresql_where=sa.text("valid_to IS NULL AND subject IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_turns_unscored", table_name="turns", schema="episodic")
    op.drop_index(
        "ix_memories_current_subject",
        table_name="memories",
        schema="semantic",
        postgresql_where=sa.text("valid_to IS NULL AND subject IS NOT NULL"),
    )
    op.drop_column("memories", "metadata", schema="semantic")
    op.drop_column("memories", "extraction_batch_id", schema="semantic")
    op.drop_column("memories", "extractor", schema="semantic")
    op.drop_column("memories", "value", schema="semantic")
    op.drop_column("memories", "subject", schema="semantic")
    op.drop_column("memories", "original", schema="semantic")
    op.drop_index(
        "ix_turns_unextracted",
        table_name="turns",
        schema="episodic",
        postgresql_where=sa.text("extraction_batch_id IS NULL"),
    )
    op.drop_column("turns", "extraction_batch_id", schema="episodic")
    op.drop_column("turns", "attention", schema="episodic")
    op.drop_column("turns", "salience", schema="episodic")
    op.drop_column("turns", "novelty", schema="episodic")
    op.drop_column("turns", "connection_relevance", schema="episodic")
    op.drop_column("turns", "emotional_intensity", schema="episodic")
    op.drop_constraint(
        op.f("uq_mentions_entity_id_memory_id"), "mentions", schema="conceptual", type_="unique"
    )
    op.create_index(
        op.f("ix_mentions_entity_id"), "mentions", ["entity_id"], unique=False, schema="conceptual"
    )
    op.drop_index(
        "ix_extraction_batches_tenant_user", table_name="extraction_batches", schema="semantic"
    )
    op.drop_index(
        "ix_extraction_batches_state_updated", table_name="extraction_batches", schema="semantic"
    )
    op.drop_table("extraction_batches", schema="semantic")
