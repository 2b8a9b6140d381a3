"""Turns as retrieval units: a dense vector and a stored, speaker-aware tsvector per turn

Revision ID: 4d7a1c9e8b20
Revises: 9e4f2b7c1d35
Create Date: 2026-11-24 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects.postgresql import TSVECTOR

from app.config import get_settings

EMBEDDING_DIM = get_settings().embedding_dim

SEARCH_TSV_FUNCTION = """
CREATE FUNCTION episodic.turns_search_tsv() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.search_tsv := to_tsvector('english'::regconfig,
        coalesce(NEW.speaker, '') || ' ' || NEW.content);
    RETURN NEW;
END
$$
"""
MATCH_TURNS = """
CREATE OR REPLACE FUNCTION episodic.match_turns(
    p_user text, p_query tsquery, p_limit integer, p_channel text, p_since timestamptz,
    p_until timestamptz)
RETURNS TABLE (id uuid, v text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.id, CAST(t.search_tsv AS text)
    FROM episodic.turns AS t
    WHERE t.tenant_id = current_setting('engram.tenant_id', true) AND t.user_id = p_user
      AND t.search_tsv @@ p_query
      AND (p_channel IS NULL OR t.channel = p_channel)
      AND (p_since IS NULL OR t.occurred_at >= p_since)
      AND (p_until IS NULL OR t.occurred_at < p_until)
    ORDER BY ts_rank(t.search_tsv, p_query) DESC, t.id
    LIMIT p_limit
$$
"""
OLD_MATCH_TURNS = """
CREATE OR REPLACE FUNCTION episodic.match_turns(
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

revision: str = "4d7a1c9e8b20"
down_revision: str | None = "9e4f2b7c1d35"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The turn's own vector (the one attention computes for novelty anyway), so a question
    # that shares no word with the turn still finds it.
    op.add_column(
        "turns", sa.Column("embedding", Vector(EMBEDDING_DIM), nullable=True), schema="episodic"
    )
    # Stored and kept by a trigger (like semantic.memories.search_tsv): term statistics read
    # hundreds of rows per search, and parsing each turn's text on every search was their
    # cost. The speaker's name is part of what a turn says ("what did Ana say about …").
    op.add_column("turns", sa.Column("search_tsv", TSVECTOR()), schema="episodic")
    op.execute(SEARCH_TSV_FUNCTION)
    op.execute(
        "CREATE TRIGGER turns_search_tsv BEFORE INSERT OR UPDATE OF content, speaker"
        " ON episodic.turns FOR EACH ROW EXECUTE FUNCTION episodic.turns_search_tsv()"
    )
    op.execute(
        "UPDATE episodic.turns SET search_tsv = to_tsvector('english'::regconfig,"
        " coalesce(speaker, '') || ' ' || content)"
    )
    op.drop_index("ix_turns_content_tsv", table_name="turns", schema="episodic")
    op.execute(
        "CREATE INDEX ix_turns_search_tsv ON episodic.turns"
        " USING gin (tenant_id, user_id, search_tsv)"
    )
    op.execute(
        "CREATE INDEX ix_turns_embedding_hnsw ON episodic.turns"
        " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
        " WHERE embedding IS NOT NULL"
    )
    op.execute(MATCH_TURNS)


def downgrade() -> None:
    op.execute(OLD_MATCH_TURNS)
    op.execute("DROP INDEX IF EXISTS episodic.ix_turns_embedding_hnsw")
    op.execute("DROP INDEX IF EXISTS episodic.ix_turns_search_tsv")
    op.execute(
        "CREATE INDEX ix_turns_content_tsv ON episodic.turns"
        " USING gin (tenant_id, user_id, to_tsvector('english'::regconfig, content))"
    )
    op.execute("DROP TRIGGER IF EXISTS turns_search_tsv ON episodic.turns")
    op.execute("DROP FUNCTION IF EXISTS episodic.turns_search_tsv()")
    op.drop_column("turns", "search_tsv", schema="episodic")
    op.drop_column("turns", "embedding", schema="episodic")
