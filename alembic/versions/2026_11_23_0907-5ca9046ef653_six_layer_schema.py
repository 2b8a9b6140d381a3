"""Six-layer schema: working, episodic, semantic, conceptual, meta; RLS on every tenant table

Revision ID: 5ca9046ef653
Revises:
Create Date: 2026-11-23 09:07:12.695633
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects import postgresql

from app.config import get_settings

LAYER_SCHEMAS = ("working", "episodic", "semantic", "conceptual", "meta")
EMBEDDING_DIM = get_settings().embedding_dim
APP_ROLE = get_settings().app_role
TENANT_TABLES = (
    ("working", "summaries"),
    ("episodic", "sessions"),
    ("episodic", "turns"),
    ("episodic", "events"),
    ("semantic", "memories"),
    ("conceptual", "entities"),
    ("conceptual", "relations"),
    ("conceptual", "mentions"),
    ("conceptual", "associations"),
    ("meta", "access_patterns"),
    ("meta", "procedures"),
)

# Rows are visible and writable only inside a transaction scoped to their tenant with
# set_config('engram.tenant_id', <tenant>, true). With no setting, current_setting(..., true) is
# NULL (or '' once the session has used it), which matches no tenant.
TENANT_PREDICATE = "tenant_id = current_setting('engram.tenant_id', true)"

# Hot memories per user: importance plus recent retrieval hits (7 days) and lifetime access.
# Materialized views cannot carry RLS, so the application reads it only through the
# security-barrier view below, which filters on the same tenant setting; the matview itself is
# not granted to the application role.
HOT_MEMORIES_MV = """
CREATE MATERIALIZED VIEW meta.hot_memories_mv AS
WITH recent_hits AS (
    SELECT hit AS memory_id, count(*) AS hits, max(ap.created_at) AS last_hit_at
    FROM meta.access_patterns AS ap, unnest(ap.hit_ids) AS hit
    WHERE ap.created_at > now() - interval '7 days'
    GROUP BY hit
), scored AS (
    SELECT m.tenant_id, m.user_id, m.id AS memory_id, m.kind, m.importance, m.access_count,
           coalesce(h.hits, 0) AS recent_hits, h.last_hit_at,
           m.importance + ln(1 + coalesce(h.hits, 0)) + 0.1 * ln(1 + m.access_count) AS heat
    FROM semantic.memories AS m
    LEFT JOIN recent_hits AS h ON h.memory_id = m.id
    WHERE m.archived_at IS NULL AND m.valid_to IS NULL
)
SELECT * FROM (
    SELECT scored.*,
           row_number() OVER (PARTITION BY tenant_id, user_id ORDER BY heat DESC, memory_id) AS rank
    FROM scored
) AS ranked
WHERE rank <= 200
"""


def require_app_role() -> None:
    op.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                RAISE EXCEPTION 'create the application login role "{APP_ROLE}" first '
                    '(NOSUPERUSER NOBYPASSRLS); see README, "Running it for real"';
            END IF;
        END $$;
        """
    )


def secure_tenant_table(schema: str, table: str) -> None:
    op.execute(f"ALTER TABLE {schema}.{table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {schema}.{table} FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {schema}.{table} "
        f"USING ({TENANT_PREDICATE}) WITH CHECK ({TENANT_PREDICATE})"
    )
    op.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.{table} TO "{APP_ROLE}"')


revision: str = "5ca9046ef653"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    require_app_role()
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for schema in LAYER_SCHEMAS:
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    op.create_table(
        "entities",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("canonical_name", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=64), server_default="thing", nullable=False),
        sa.Column("mention_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "first_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "last_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entities")),
        sa.UniqueConstraint(
            "tenant_id",
            "user_id",
            "canonical_name",
            name=op.f("uq_entities_tenant_id_user_id_canonical_name"),
        ),
        schema="conceptual",
    )
    op.create_index(
        "ix_entities_name_trgm",
        "entities",
        ["name"],
        unique=False,
        schema="conceptual",
        postgresql_using="gin",
        postgresql_ops={"name": "gin_trgm_ops"},
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("known_type", sa.Boolean(), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "payload",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("stream_entry_id", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
        schema="episodic",
    )
    op.create_index(
        "ix_events_tenant_user_occurred",
        "events",
        ["tenant_id", "user_id", "occurred_at"],
        unique=False,
        schema="episodic",
    )
    op.create_index(
        "ix_events_type_occurred",
        "events",
        ["type", "occurred_at"],
        unique=False,
        schema="episodic",
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_turn_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("turn_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "channels", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column(
            "topics",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
        schema="episodic",
    )
    op.create_index(
        "ix_sessions_tenant_user_last_turn",
        "sessions",
        ["tenant_id", "user_id", "last_turn_at"],
        unique=False,
        schema="episodic",
    )
    op.create_index(
        "ix_sessions_topics",
        "sessions",
        ["topics"],
        unique=False,
        schema="episodic",
        postgresql_using="gin",
    )
    op.create_table(
        "tenants",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenants")),
        schema="meta",
    )
    op.execute(f'GRANT SELECT, INSERT ON meta.tenants TO "{APP_ROLE}"')
    op.create_table(
        "access_patterns",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=True),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("query_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "hit_ids", postgresql.ARRAY(sa.Uuid()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column(
            "scores", postgresql.ARRAY(sa.Float()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("hour_of_day", sa.SmallInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_access_patterns")),
        schema="meta",
    )
    op.create_index(
        "ix_access_patterns_created_at",
        "access_patterns",
        ["created_at"],
        unique=False,
        schema="meta",
    )
    op.create_index(
        "ix_access_patterns_tenant_user_channel_created",
        "access_patterns",
        ["tenant_id", "user_id", "channel", "created_at"],
        unique=False,
        schema="meta",
    )
    op.create_table(
        "procedures",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("query_pattern", sa.Text(), nullable=False),
        sa.Column("pattern_hash", sa.String(length=64), nullable=False),
        sa.Column("query_embedding", Vector(EMBEDDING_DIM), nullable=True),
        sa.Column("tool_sequence", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("sequence_hash", sa.String(length=64), nullable=False),
        sa.Column("executions", sa.Integer(), server_default="0", nullable=False),
        sa.Column("avg_success", sa.Float(), server_default="0", nullable=False),
        sa.Column("avg_duration_ms", sa.Float(), server_default="0", nullable=False),
        sa.Column("confidence", sa.Float(), server_default="0", nullable=False),
        sa.Column("last_executed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_procedures")),
        sa.UniqueConstraint(
            "tenant_id",
            "user_id",
            "pattern_hash",
            "sequence_hash",
            name=op.f("uq_procedures_tenant_id_user_id_pattern_hash_sequence_hash"),
        ),
        schema="meta",
    )
    op.create_index(
        "ix_procedures_query_embedding_hnsw",
        "procedures",
        ["query_embedding"],
        unique=False,
        schema="meta",
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"query_embedding": "vector_cosine_ops"},
    )
    op.create_table(
        "summaries",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("summary", sa.Text(), server_default="", nullable=False),
        sa.Column("summary_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("turns_summarised", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_turn_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "flushed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", name=op.f("pk_summaries")),
        schema="working",
    )
    op.create_table(
        "turns",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("external_id", sa.String(length=256), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("speaker", sa.String(length=128), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "topics",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "flags", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("stream_entry_id", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["episodic.sessions.id"],
            name=op.f("fk_turns_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_turns")),
        sa.UniqueConstraint(
            "tenant_id",
            "user_id",
            "external_id",
            name=op.f("uq_turns_tenant_id_user_id_external_id"),
        ),
        schema="episodic",
    )
    op.create_index(
        "ix_turns_content_trgm",
        "turns",
        ["content"],
        unique=False,
        schema="episodic",
        postgresql_using="gin",
        postgresql_ops={"content": "gin_trgm_ops"},
    )
    op.create_index(
        "ix_turns_session_occurred",
        "turns",
        ["session_id", "occurred_at"],
        unique=False,
        schema="episodic",
    )
    op.create_index(
        "ix_turns_tenant_user_occurred",
        "turns",
        ["tenant_id", "user_id", "occurred_at"],
        unique=False,
        schema="episodic",
    )
    op.create_index(
        "ix_turns_topics",
        "turns",
        ["topics"],
        unique=False,
        schema="episodic",
        postgresql_using="gin",
    )
    op.create_table(
        "memories",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "topics",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "tags", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("importance", sa.Float(), server_default="0.5", nullable=False),
        sa.Column("emotional_intensity", sa.Float(), server_default="0", nullable=False),
        sa.Column("salience", sa.Float(), server_default="0", nullable=False),
        sa.Column("consolidation_strength", sa.Float(), server_default="0", nullable=False),
        sa.Column("replay_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("access_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_accessed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("superseded_by", sa.Uuid(), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("session_id", sa.Uuid(), nullable=True),
        sa.Column(
            "source_turn_ids",
            postgresql.ARRAY(sa.Uuid()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("embedding", Vector(EMBEDDING_DIM), nullable=True),
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
            "kind IN ('decision', 'fact', 'preference', 'todo', 'code', 'goal', 'event', 'consolidated')",
            name=op.f("ck_memories_kind_known"),
        ),
        sa.CheckConstraint(
            "importance >= 0 AND importance <= 1", name=op.f("ck_memories_importance_unit")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["episodic.sessions.id"],
            name=op.f("fk_memories_session_id_sessions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["superseded_by"],
            ["semantic.memories.id"],
            name=op.f("fk_memories_superseded_by_memories"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memories")),
        sa.UniqueConstraint(
            "tenant_id",
            "user_id",
            "content_hash",
            name=op.f("uq_memories_tenant_id_user_id_content_hash"),
        ),
        schema="semantic",
    )
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
        "ix_memories_embedding_hnsw",
        "memories",
        ["embedding"],
        unique=False,
        schema="semantic",
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.create_index(
        "ix_memories_tags",
        "memories",
        ["tags"],
        unique=False,
        schema="semantic",
        postgresql_using="gin",
    )
    op.create_index(
        "ix_memories_tenant_user_importance",
        "memories",
        ["tenant_id", "user_id", "importance"],
        unique=False,
        schema="semantic",
    )
    op.create_index(
        "ix_memories_tenant_user_occurred",
        "memories",
        ["tenant_id", "user_id", "occurred_at"],
        unique=False,
        schema="semantic",
    )
    op.create_index(
        "ix_memories_topics",
        "memories",
        ["topics"],
        unique=False,
        schema="semantic",
        postgresql_using="gin",
    )
    op.create_table(
        "associations",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("memory_a", sa.Uuid(), nullable=False),
        sa.Column("memory_b", sa.Uuid(), nullable=False),
        sa.Column("weight", sa.Float(), server_default="0", nullable=False),
        sa.Column("co_activations", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "last_activated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("memory_a < memory_b", name=op.f("ck_associations_ordered_pair")),
        sa.CheckConstraint("weight >= 0 AND weight <= 1", name=op.f("ck_associations_weight_unit")),
        sa.ForeignKeyConstraint(
            ["memory_a"],
            ["semantic.memories.id"],
            name=op.f("fk_associations_memory_a_memories"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["memory_b"],
            ["semantic.memories.id"],
            name=op.f("fk_associations_memory_b_memories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("memory_a", "memory_b", name=op.f("pk_associations")),
        schema="conceptual",
    )
    op.create_index(
        "ix_associations_memory_b", "associations", ["memory_b"], unique=False, schema="conceptual"
    )
    op.create_index(
        "ix_associations_tenant_user",
        "associations",
        ["tenant_id", "user_id"],
        unique=False,
        schema="conceptual",
    )
    op.create_table(
        "mentions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("entity_id", sa.Uuid(), nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=True),
        sa.Column("turn_id", sa.Uuid(), nullable=True),
        sa.Column("surface", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["entity_id"],
            ["conceptual.entities.id"],
            name=op.f("fk_mentions_entity_id_entities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["memory_id"],
            ["semantic.memories.id"],
            name=op.f("fk_mentions_memory_id_memories"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["turn_id"],
            ["episodic.turns.id"],
            name=op.f("fk_mentions_turn_id_turns"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mentions")),
        schema="conceptual",
    )
    op.create_index(
        "ix_mentions_entity_id", "mentions", ["entity_id"], unique=False, schema="conceptual"
    )
    op.create_index(
        "ix_mentions_memory_id", "mentions", ["memory_id"], unique=False, schema="conceptual"
    )
    op.create_index(
        "ix_mentions_turn_id", "mentions", ["turn_id"], unique=False, schema="conceptual"
    )
    op.create_table(
        "relations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("source_entity_id", sa.Uuid(), nullable=False),
        sa.Column("target_entity_id", sa.Uuid(), nullable=False),
        sa.Column("relation_type", sa.String(length=64), nullable=False),
        sa.Column("weight", sa.Float(), server_default="1", nullable=False),
        sa.Column("mention_count", sa.Integer(), server_default="1", nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=True),
        sa.Column("turn_id", sa.Uuid(), nullable=True),
        sa.Column(
            "valid_from",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["memory_id"],
            ["semantic.memories.id"],
            name=op.f("fk_relations_memory_id_memories"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["source_entity_id"],
            ["conceptual.entities.id"],
            name=op.f("fk_relations_source_entity_id_entities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["target_entity_id"],
            ["conceptual.entities.id"],
            name=op.f("fk_relations_target_entity_id_entities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["turn_id"],
            ["episodic.turns.id"],
            name=op.f("fk_relations_turn_id_turns"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relations")),
        sa.UniqueConstraint(
            "tenant_id",
            "source_entity_id",
            "target_entity_id",
            "relation_type",
            name=op.f("uq_relations_tenant_id_source_entity_id_target_entity_id_relation_type"),
        ),
        schema="conceptual",
    )
    op.create_index(
        "ix_relations_target_entity_id",
        "relations",
        ["target_entity_id"],
        unique=False,
        schema="conceptual",
    )
    for schema in LAYER_SCHEMAS:
        op.execute(f'GRANT USAGE ON SCHEMA {schema} TO "{APP_ROLE}"')
    for schema, table in TENANT_TABLES:
        secure_tenant_table(schema, table)
    op.execute(HOT_MEMORIES_MV)
    op.execute(
        "CREATE UNIQUE INDEX ux_hot_memories_mv_memory_id ON meta.hot_memories_mv (memory_id)"
    )
    op.execute(
        "CREATE VIEW meta.hot_memories WITH (security_barrier) AS "
        f"SELECT * FROM meta.hot_memories_mv WHERE {TENANT_PREDICATE}"
    )
    op.execute(f'GRANT SELECT ON meta.hot_memories TO "{APP_ROLE}"')


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS meta.hot_memories")
    op.execute("DROP MATERIALIZED VIEW IF EXISTS meta.hot_memories_mv")
    op.drop_index("ix_relations_target_entity_id", table_name="relations", schema="conceptual")
    op.drop_table("relations", schema="conceptual")
    op.drop_index("ix_mentions_turn_id", table_name="mentions", schema="conceptual")
    op.drop_index("ix_mentions_memory_id", table_name="mentions", schema="conceptual")
    op.drop_index("ix_mentions_entity_id", table_name="mentions", schema="conceptual")
    op.drop_table("mentions", schema="conceptual")
    op.drop_index("ix_associations_tenant_user", table_name="associations", schema="conceptual")
    op.drop_index("ix_associations_memory_b", table_name="associations", schema="conceptual")
    op.drop_table("associations", schema="conceptual")
    op.drop_index(
        "ix_memories_topics", table_name="memories", schema="semantic", postgresql_using="gin"
    )
    op.drop_index("ix_memories_tenant_user_occurred", table_name="memories", schema="semantic")
    op.drop_index("ix_memories_tenant_user_importance", table_name="memories", schema="semantic")
    op.drop_index(
        "ix_memories_tags", table_name="memories", schema="semantic", postgresql_using="gin"
    )
    op.drop_index(
        "ix_memories_embedding_hnsw",
        table_name="memories",
        schema="semantic",
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.drop_index(
        "ix_memories_content_trgm",
        table_name="memories",
        schema="semantic",
        postgresql_using="gin",
        postgresql_ops={"content": "gin_trgm_ops"},
    )
    op.drop_table("memories", schema="semantic")
    op.drop_index("ix_turns_topics", table_name="turns", schema="episodic", postgresql_using="gin")
    op.drop_index("ix_turns_tenant_user_occurred", table_name="turns", schema="episodic")
    op.drop_index("ix_turns_session_occurred", table_name="turns", schema="episodic")
    op.drop_index(
        "ix_turns_content_trgm",
        table_name="turns",
        schema="episodic",
        postgresql_using="gin",
        postgresql_ops={"content": "gin_trgm_ops"},
    )
    op.drop_table("turns", schema="episodic")
    op.drop_table("summaries", schema="working")
    op.drop_index(
        "ix_procedures_query_embedding_hnsw",
        table_name="procedures",
        schema="meta",
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"query_embedding": "vector_cosine_ops"},
    )
    op.drop_table("procedures", schema="meta")
    op.drop_index(
        "ix_access_patterns_tenant_user_channel_created",
        table_name="access_patterns",
        schema="meta",
    )
    op.drop_index("ix_access_patterns_created_at", table_name="access_patterns", schema="meta")
    op.drop_table("access_patterns", schema="meta")
    op.drop_table("tenants", schema="meta")
    op.drop_index(
        "ix_sessions_topics", table_name="sessions", schema="episodic", postgresql_using="gin"
    )
    op.drop_index("ix_sessions_tenant_user_last_turn", table_name="sessions", schema="episodic")
    op.drop_table("sessions", schema="episodic")
    op.drop_index("ix_events_type_occurred", table_name="events", schema="episodic")
    op.drop_index("ix_events_tenant_user_occurred", table_name="events", schema="episodic")
    op.drop_table("events", schema="episodic")
    op.drop_index(
        "ix_entities_name_trgm",
        table_name="entities",
        schema="conceptual",
        postgresql_using="gin",
        postgresql_ops={"name": "gin_trgm_ops"},
    )
    op.drop_table("entities", schema="conceptual")
    for schema in reversed(LAYER_SCHEMAS):
        op.execute(f'REVOKE ALL ON SCHEMA {schema} FROM "{APP_ROLE}"')
        op.execute(f"DROP SCHEMA IF EXISTS {schema}")
