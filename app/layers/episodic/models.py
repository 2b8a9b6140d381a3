"""L2 episodic: sessions and every message and event, immutable and complete."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    SmallInteger,
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
    tenant_column,
    tenant_key,
    tenant_reference,
    user_column,
    uuid_id,
)
from app.layers.episodic.message_order import arrival

# The trace's partitions (hash of tenant and user): one user's reads touch one of them. The
# count is fixed by the tenant_keys_and_partitions migration.
TURN_PARTITIONS = 16


class Session(Base):
    """A run of one user's turns (across channels) with no gap longer than the idle timeout."""

    __tablename__ = "sessions"
    __table_args__ = (
        tenant_key("id"),
        Index("ix_sessions_tenant_user_last_turn", "tenant_id", "user_id", "last_turn_at"),
        Index("ix_sessions_topics", "topics", postgresql_using="gin"),
        Index(
            "ix_sessions_unsummarised",
            "tenant_id",
            "id",
            postgresql_where=text("closed_at IS NOT NULL AND summary IS NULL"),
        ),
        {"schema": "episodic"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    last_turn_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    turn_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    channels: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'")
    )
    summary: Mapped[str | None] = mapped_column(Text)
    topics: Mapped[list[Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    created_at: Mapped[datetime] = created_at_column()


class Turn(Base):
    """One message as the producer sent it; `id` is the event id, so re-delivery is a no-op.

    Partitioned by HASH (tenant_id, user_id) into TURN_PARTITIONS tables; every index below
    is one per partition (the HNSW graph included), and a read that names the user (under
    the tenant's row-level security) reads one partition."""

    __tablename__ = "turns"
    __table_args__ = (
        PrimaryKeyConstraint("id", "tenant_id", "user_id"),
        UniqueConstraint("tenant_id", "user_id", "external_id"),
        tenant_reference("session_id", "episodic.sessions", "CASCADE"),
        Index("ix_turns_tenant_user_occurred", "tenant_id", "user_id", "occurred_at"),
        # A session in message order: the walks to a turn's neighbours (message_order.py).
        Index("ix_turns_session_order", "session_id", "occurred_at", text(arrival("")), "id"),
        # One user's rows matching the words, straight from the index (btree_gin keys the
        # user columns): read through episodic.match_turns(), see the recall migration.
        Index("ix_turns_search_tsv", "tenant_id", "user_id", "search_tsv", postgresql_using="gin"),
        Index("ix_turns_topics", "topics", postgresql_using="gin"),
        Index(
            "ix_turns_unextracted",
            "tenant_id",
            "user_id",
            "occurred_at",
            postgresql_where=text("extraction_batch_id IS NULL"),
        ),
        Index(
            "ix_turns_unscored",
            "tenant_id",
            "user_id",
            "occurred_at",
            postgresql_where=text("salience IS NULL"),
        ),
        Index(
            "ix_turns_extraction_batch",
            "extraction_batch_id",
            postgresql_where=text("extraction_batch_id IS NOT NULL"),
        ),
        {"schema": "episodic", "postgresql_partition_by": "HASH (tenant_id, user_id)"},
    )

    id: Mapped[uuid.UUID] = mapped_column()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    # Provenance only: turns are the shared archive every agent of the user reads.
    agent_id: Mapped[str | None] = agent_column()
    session_id: Mapped[uuid.UUID] = mapped_column(nullable=False)
    external_id: Mapped[str] = mapped_column(String(256), nullable=False)
    role: Mapped[str] = mapped_column(String(32), nullable=False)
    speaker: Mapped[str | None] = mapped_column(String(128))
    content: Mapped[str] = mapped_column(Text, nullable=False)
    channel: Mapped[str] = mapped_column(String(128), nullable=False)
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    received_at: Mapped[datetime] = created_at_column()
    token_count: Mapped[int] = mapped_column(Integer, nullable=False)
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    topics: Mapped[list[Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    flags: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'")
    )
    stream_entry_id: Mapped[str | None] = mapped_column(String(64))
    # Attention (set by the salience step): parts, composite, and the competition's outcome.
    emotional_intensity: Mapped[float | None] = mapped_column(Float)
    connection_relevance: Mapped[float | None] = mapped_column(Float)
    novelty: Mapped[float | None] = mapped_column(Float)
    salience: Mapped[float | None] = mapped_column(Float)
    attention: Mapped[str | None] = mapped_column(String(16))
    # The extraction batch that claimed this turn: set once, so a turn is extracted once.
    extraction_batch_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    # Retrieval keys: its words with the speaker's name, kept by a trigger
    # (episodic.turns_search_tsv) on insert and on content or speaker changes; its vectors are
    # its passages (TurnPassage), set with its attention scores.
    search_tsv: Mapped[Any | None] = mapped_column(TSVECTOR)


class RawEvent(Base):
    """Every non-turn event (typing, channel switch, sensor, presence, tool run, unknown).

    Partitioned by RANGE (occurred_at), a partition per UTC day and a default one; retention
    drops whole days (app/db/partitions.py)."""

    __tablename__ = "events"
    __table_args__ = (
        PrimaryKeyConstraint("id", "tenant_id", "occurred_at"),
        Index("ix_events_tenant_user_occurred", "tenant_id", "user_id", "occurred_at"),
        Index("ix_events_type_occurred", "type", "occurred_at"),
        {"schema": "episodic", "postgresql_partition_by": "RANGE (occurred_at)"},
    )

    id: Mapped[uuid.UUID] = mapped_column()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    type: Mapped[str] = mapped_column(String(64), nullable=False)
    known_type: Mapped[bool] = mapped_column(Boolean, nullable=False)
    channel: Mapped[str | None] = mapped_column(String(128))
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    received_at: Mapped[datetime] = created_at_column()
    payload: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    stream_entry_id: Mapped[str | None] = mapped_column(String(64))


class TurnPassage(Base):
    """A turn's dense retrieval key: one sentence (or the whole turn) led by the speaker's
    name, embedded (app/text/passages.py). Partitioned like the trace, beside its turn."""

    __tablename__ = "turn_passages"
    __table_args__ = (
        PrimaryKeyConstraint("turn_id", "ordinal", "tenant_id", "user_id"),
        ForeignKeyConstraint(
            ["turn_id", "tenant_id", "user_id"],
            ["episodic.turns.id", "episodic.turns.tenant_id", "episodic.turns.user_id"],
            ondelete="CASCADE",
            name="fk_turn_passages_turn",
        ),
        Index("ix_turn_passages_tenant_user_occurred", "tenant_id", "user_id", "occurred_at"),
        Index(
            "ix_turn_passages_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_with={"m": 16, "ef_construction": 64},
            postgresql_ops={"embedding": "vector_cosine_ops"},
        ),
        {"schema": "episodic", "postgresql_partition_by": "HASH (tenant_id, user_id)"},
    )

    turn_id: Mapped[uuid.UUID] = mapped_column(Uuid, nullable=False)
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    ordinal: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    # The turn's, copied (turns never change): time- and channel-bound searches need no join.
    channel: Mapped[str] = mapped_column(String(128), nullable=False)
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    embedding: Mapped[Any] = mapped_column(Vector(get_settings().embedding_dim), nullable=False)
