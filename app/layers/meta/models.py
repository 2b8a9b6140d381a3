"""L5 meta: access patterns and procedural memory; hot memories is a materialized view."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    DateTime,
    Float,
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
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.config import get_settings
from app.db.base import (
    Base,
    created_at_column,
    tenant_column,
    tenant_key,
    user_column,
    uuid_id,
    uuid_pk,
)


class Tenant(Base):
    """Registry of tenants seen, so maintenance can walk tenants one RLS scope at a time.

    Holds ids only, under the tenant policy like every table: the app role sees its own row,
    records tenants through `meta.register_tenants` and lists them through `meta.tenant_ids()`
    (owner-run functions), and cannot write the table itself.
    """

    __tablename__ = "tenants"
    __table_args__ = ({"schema": "meta"},)

    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    created_at: Mapped[datetime] = created_at_column()


class ApiKey(Base):
    """A tenant's API key, stored as a SHA-256 digest; the secret is shown once, at minting.

    The request path resolves a digest to its tenant through `meta.api_key_tenant()`, a
    security-definer function, so the application role never reads other tenants' keys.
    """

    __tablename__ = "api_keys"
    __table_args__ = ({"schema": "meta"},)

    id: Mapped[uuid.UUID] = uuid_pk()
    tenant_id: Mapped[str] = tenant_column()
    name: Mapped[str] = mapped_column(String(128), nullable=False, server_default="")
    key_prefix: Mapped[str] = mapped_column(String(32), nullable=False)
    key_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    created_at: Mapped[datetime] = created_at_column()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class JobRun(Base):
    """One run of a periodic job over one tenant (or `*` for a job over the whole database):
    what `engram status` and GET /v1/stats show, and where a stuck or failing job is seen."""

    __tablename__ = "job_runs"
    __table_args__ = (
        tenant_key("id"),
        Index("ix_job_runs_job_started", "job", "started_at"),
        Index("ix_job_runs_tenant_started", "tenant_id", "started_at"),
        {"schema": "meta"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    job: Mapped[str] = mapped_column(String(64), nullable=False)
    scope: Mapped[str] = mapped_column(String(256), nullable=False, server_default="")
    tick: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="running")
    rows: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    errors: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    detail: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = created_at_column()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AccessPattern(Base):
    """One recorded search. Partitioned by RANGE (created_at), a partition per UTC day and a
    default one; pruning drops whole days (app/db/partitions.py)."""

    __tablename__ = "access_patterns"
    __table_args__ = (
        PrimaryKeyConstraint("id", "tenant_id", "created_at"),
        Index(
            "ix_access_patterns_tenant_user_channel_created",
            "tenant_id",
            "user_id",
            "channel",
            "created_at",
        ),
        Index("ix_access_patterns_created_at", "created_at"),
        {"schema": "meta", "postgresql_partition_by": "RANGE (created_at)"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    channel: Mapped[str | None] = mapped_column(String(128))
    query: Mapped[str] = mapped_column(Text, nullable=False)
    query_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    hit_ids: Mapped[list[uuid.UUID]] = mapped_column(
        ARRAY(Uuid), nullable=False, server_default=text("'{}'")
    )
    scores: Mapped[list[float]] = mapped_column(
        ARRAY(Float), nullable=False, server_default=text("'{}'")
    )
    hour_of_day: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    created_at: Mapped[datetime] = created_at_column()


class Procedure(Base):
    """A query pattern → tool sequence, with outcome statistics and derived confidence."""

    __tablename__ = "procedures"
    __table_args__ = (
        tenant_key("id"),
        UniqueConstraint("tenant_id", "user_id", "pattern_hash", "sequence_hash"),
        Index(
            "ix_procedures_query_embedding_hnsw",
            "query_embedding",
            postgresql_using="hnsw",
            postgresql_with={"m": 16, "ef_construction": 64},
            postgresql_ops={"query_embedding": "vector_cosine_ops"},
        ),
        {"schema": "meta"},
    )

    id: Mapped[uuid.UUID] = uuid_id()
    tenant_id: Mapped[str] = tenant_column()
    user_id: Mapped[str] = user_column()
    query_pattern: Mapped[str] = mapped_column(Text, nullable=False)
    pattern_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    query_embedding: Mapped[Any | None] = mapped_column(Vector(get_settings().embedding_dim))
    tool_sequence: Mapped[list[Any]] = mapped_column(JSONB, nullable=False)
    sequence_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    executions: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    avg_success: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    avg_duration_ms: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    confidence: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    last_executed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at_column()
