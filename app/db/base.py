"""Declarative base shared by every layer's models, with stable constraint names."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    Boolean,
    DateTime,
    ForeignKeyConstraint,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Text,
    false,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# One Postgres schema per durable layer; `working` holds what L1 flushes.
LAYER_SCHEMAS = ("working", "episodic", "semantic", "conceptual", "meta")

# The per-transaction setting row-level security keys on (set with set_config(..., true)).
TENANT_SETTING = "engram.tenant_id"
# The agent a transaction reads and writes as, and the switch background work uses to see
# every agent's rows (see the agents_and_knowledge migration).
AGENT_SETTING = "engram.agent_id"
ALL_AGENTS_SETTING = "engram.all_agents"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def uuid_pk() -> Mapped[uuid.UUID]:
    return mapped_column(primary_key=True, default=uuid.uuid4)


def uuid_id() -> Mapped[uuid.UUID]:
    """A row's UUID, keyed together with its tenant by `tenant_key`."""
    return mapped_column(default=uuid.uuid4)


def tenant_key(*columns: str) -> PrimaryKeyConstraint:
    """The primary key `columns` + tenant_id: a distributed Postgres (Citus) needs the
    distribution column in every key, and the leading columns still find a row alone (see
    the tenant_keys_and_partitions migration)."""
    return PrimaryKeyConstraint(*columns, "tenant_id")


def tenant_reference(
    columns: str, target: str, ondelete: str, *, user: bool = False
) -> ForeignKeyConstraint:
    """A reference `columns` → `target`'s id, joined on the tenant too (and on the user, into
    the user-partitioned trace). SET NULL unsets only the reference, never the tenant."""
    extra = ["tenant_id", "user_id"] if user else ["tenant_id"]
    if ondelete == "SET NULL":
        ondelete = f"SET NULL ({columns})"
    return ForeignKeyConstraint(
        [columns, *extra],
        [f"{target}.id", *(f"{target}.{column}" for column in extra)],
        ondelete=ondelete,
    )


def tenant_column() -> Mapped[str]:
    return mapped_column(String(128), nullable=False)


def user_column() -> Mapped[str]:
    return mapped_column(String(128), nullable=False)


def agent_column() -> Mapped[str | None]:
    """The agent a row belongs to; NULL is the user's level, seen by every agent."""
    return mapped_column(String(128))


def shared_column() -> Mapped[bool]:
    """An agent's row every agent of the user may read (row-level security honours it)."""
    return mapped_column(Boolean, nullable=False, server_default=false())


def created_at_column() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


def text_column(nullable: bool = False) -> Mapped[str]:
    return mapped_column(Text, nullable=nullable)
