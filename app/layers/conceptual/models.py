"""L4 conceptual: entities, typed relations, mentions, and Hebbian memory associations."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import Mapped, mapped_column

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


class Entity(Base):
    __tablename__ = "entities"
    __table_args__ = (
        tenant_key("id"),
        UniqueConstraint("tenant_id", "user_id", "canonical_name"),
        Index(
            "ix_entities_name_trgm",
            "name",
            postgresql_using="gin",
            postgresql_ops={"name": "gin_trgm_ops"},
        ),
        {"schema": "conceptual"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    name: Mapped[str] = mapped_column(Text, nullable=False)
    canonical_name: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(String(64), nullable=False, server_default="thing")
    mention_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    first_seen_at: Mapped[datetime] = created_at_column()
    last_seen_at: Mapped[datetime] = created_at_column()


class Relation(Base):
    __tablename__ = "relations"
    __table_args__ = (
        tenant_key("id"),
        UniqueConstraint("tenant_id", "source_entity_id", "target_entity_id", "relation_type"),
        tenant_reference("source_entity_id", "conceptual.entities", "CASCADE"),
        tenant_reference("target_entity_id", "conceptual.entities", "CASCADE"),
        tenant_reference("memory_id", "semantic.memories", "SET NULL", user=True),
        tenant_reference("turn_id", "episodic.turns", "SET NULL", user=True),
        Index("ix_relations_target_entity_id", "target_entity_id"),
        {"schema": "conceptual"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    agent_id: Mapped[str | None] = agent_column()
    shared: Mapped[bool] = shared_column()
    source_entity_id: Mapped[uuid.UUID] = mapped_column(nullable=False)
    target_entity_id: Mapped[uuid.UUID] = mapped_column(nullable=False)
    relation_type: Mapped[str] = mapped_column(String(64), nullable=False)
    weight: Mapped[float] = mapped_column(Float, nullable=False, server_default="1")
    mention_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    memory_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    turn_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    valid_from: Mapped[datetime] = created_at_column()
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at_column()


class Mention(Base):
    __tablename__ = "mentions"
    __table_args__ = (
        tenant_key("id"),
        UniqueConstraint("entity_id", "memory_id", "tenant_id"),
        tenant_reference("entity_id", "conceptual.entities", "CASCADE"),
        tenant_reference("memory_id", "semantic.memories", "CASCADE", user=True),
        tenant_reference("turn_id", "episodic.turns", "CASCADE", user=True),
        Index("ix_mentions_memory_id", "memory_id"),
        Index("ix_mentions_turn_id", "turn_id"),
        {"schema": "conceptual"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    entity_id: Mapped[uuid.UUID] = mapped_column(nullable=False)
    memory_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    turn_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    surface: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = created_at_column()


class Association(Base):
    """Memory↔memory edge with a Hebbian weight; stored once per pair (memory_a < memory_b).

    No foreign keys to the memories: their checks (a locked lookup per end of each new edge)
    were 44 % of applying a Hebbian batch. Every writer takes its ids from live memories of
    the user, memories are deleted only by forgetting their user (which deletes the user's
    edges in the same transaction), and a statement-level trigger on memories removes the
    edges of any memory deleted otherwise: an edge to a missing memory is never kept."""

    __tablename__ = "associations"
    __table_args__ = (
        tenant_key("memory_a", "memory_b"),
        CheckConstraint("memory_a < memory_b", name="ordered_pair"),
        CheckConstraint("weight >= 0 AND weight <= 1", name="weight_unit"),
        Index("ix_associations_memory_b", "memory_b"),
        Index("ix_associations_tenant_user", "tenant_id", "user_id"),
        {"schema": "conceptual"},
    )

    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    agent_id: Mapped[str | None] = agent_column()
    shared: Mapped[bool] = shared_column()
    memory_a: Mapped[uuid.UUID] = mapped_column(Uuid)
    memory_b: Mapped[uuid.UUID] = mapped_column(Uuid)
    weight: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    co_activations: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    # hebbian (fired together) | entity (share an entity) | embedding (close vectors) |
    # community (same graph community) | member (a consolidated memory and a member)
    origin: Mapped[str] = mapped_column(String(16), nullable=False, server_default="hebbian")
    last_activated_at: Mapped[datetime] = created_at_column()
    created_at: Mapped[datetime] = created_at_column()
