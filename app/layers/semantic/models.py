"""L3 semantic: gems and consolidated memories, embedded for vector search."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    CheckConstraint,
    DateTime,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from app.config import get_settings
from app.db.base import (
    Base,
    agent_column,
    created_at_column,
    shared_column,
    tenant_column,
    tenant_key,
    tenant_reference,
    user_column,
    uuid_id,
)

MEMORY_KINDS = ("decision", "fact", "preference", "todo", "code", "goal", "event", "consolidated")


class Memory(Base):
    __tablename__ = "memories"
    __table_args__ = (
        # Partitioned like the trace (migration c3f1e8a2d5b7): the key holds the user.
        PrimaryKeyConstraint("id", "tenant_id", "user_id"),
        tenant_reference("superseded_by", "semantic.memories", "SET NULL", user=True),
        tenant_reference("session_id", "episodic.sessions", "SET NULL"),
        UniqueConstraint("tenant_id", "user_id", "content_hash"),
        CheckConstraint(
            "kind IN (" + ", ".join(f"'{k}'" for k in MEMORY_KINDS) + ")", name="kind_known"
        ),
        CheckConstraint("importance >= 0 AND importance <= 1", name="importance_unit"),
        Index(
            "ix_memories_tenant_user_occurred",
            "tenant_id",
            "user_id",
            "occurred_at",
            postgresql_include=["agent_id", "shared"],
        ),
        Index("ix_memories_created_at", "created_at"),
        Index(
            "ix_memories_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_with={"m": 16, "ef_construction": 64},
            postgresql_ops={"embedding": "vector_cosine_ops"},
        ),
        # One user's rows matching the words, straight from the index (btree_gin keys the
        # user columns): read through semantic.match_memories(), see the recall migration.
        Index(
            "ix_memories_search_tsv",
            "tenant_id",
            "user_id",
            "search_tsv",
            postgresql_using="gin",
        ),
        Index("ix_memories_topics", "topics", postgresql_using="gin"),
        Index("ix_memories_tags", "tags", postgresql_using="gin"),
        Index(
            "ix_memories_current_subject",
            "tenant_id",
            "user_id",
            "subject",
            postgresql_where=text("valid_to IS NULL AND subject IS NOT NULL"),
        ),
        # Version chains are walked backwards (history) and checked on delete (the FK).
        Index(
            "ix_memories_superseded_by",
            "superseded_by",
            postgresql_where=text("superseded_by IS NOT NULL"),
        ),
        {"schema": "semantic", "postgresql_partition_by": "HASH (tenant_id, user_id)"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    agent_id: Mapped[str | None] = agent_column()
    shared: Mapped[bool] = shared_column()
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    summary: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    topics: Mapped[list[Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    tags: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'")
    )
    importance: Mapped[float] = mapped_column(Float, nullable=False, server_default="0.5")
    emotional_intensity: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    salience: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    consolidation_strength: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    replay_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    access_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    last_accessed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    superseded_by: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    session_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    source_turn_ids: Mapped[list[uuid.UUID]] = mapped_column(
        ARRAY(Uuid), nullable=False, server_default=text("'{}'")
    )
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    original: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    # Contradiction key: the same subject with another value supersedes this memory.
    subject: Mapped[str | None] = mapped_column(Text)
    value: Mapped[str | None] = mapped_column(Text)
    extractor: Mapped[str] = mapped_column(String(64), nullable=False, server_default="")
    extraction_batch_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    # STORAGE PLAIN, table toast_tuple_target 8160 (migration b8d4f2a6c913): kept in the row.
    embedding: Mapped[Any | None] = mapped_column(Vector(get_settings().embedding_dim))
    channel: Mapped[str | None] = mapped_column(String(128))
    # When decay last brought `importance` up to date (decay is applied from here on).
    decayed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A consolidated memory's members (kept as they are; the dream cycle links them here).
    member_ids: Mapped[list[uuid.UUID]] = mapped_column(
        ARRAY(Uuid), nullable=False, server_default=text("'{}'")
    )
    # Full-text side of hybrid search: to_tsvector('english', content), kept by the trigger
    # semantic.memories_search_tsv on insert and on content changes only (a generated column
    # would be recomputed by every UPDATE, decay's included).
    search_tsv: Mapped[Any | None] = mapped_column(TSVECTOR)
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = created_at_column()


class Replay(Base):
    """A memory replayed in one dream cycle: the row is the receipt that makes the cycle's
    effects on that memory happen once, however often the cycle is resumed."""

    __tablename__ = "replays"
    __table_args__ = (
        tenant_key("cycle_id", "memory_id"),
        tenant_reference("memory_id", "semantic.memories", "CASCADE", user=True),
        Index("ix_replays_tenant_user_replayed", "tenant_id", "user_id", "replayed_at"),
        {"schema": "semantic"},
    )

    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    cycle_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    memory_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    priority: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    replayed_at: Mapped[datetime] = created_at_column()


BATCH_STATES = ("claimed", "extracted", "embedded", "stored", "failed")


class ExtractionBatch(Base):
    """One user's turns claimed for extraction, and where the batch is in the pipeline.

    Claimed turns point here (episodic.turns.extraction_batch_id), so a turn is extracted once
    however many triggers fire; the gems wait here between the extract, embed and store steps.
    """

    __tablename__ = "extraction_batches"
    __table_args__ = (
        CheckConstraint(
            "state IN (" + ", ".join(f"'{s}'" for s in BATCH_STATES) + ")", name="state_known"
        ),
        tenant_key("id"),
        Index("ix_extraction_batches_state_updated", "state", "updated_at"),
        Index("ix_extraction_batches_tenant_user", "tenant_id", "user_id"),
        {"schema": "semantic"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    trigger: Mapped[str] = mapped_column(String(32), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False, server_default="claimed")
    turn_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    gem_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    gems: Mapped[list[Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = created_at_column()
