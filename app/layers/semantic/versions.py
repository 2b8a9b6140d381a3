"""SQL for memory versions: an edit inserts a new row and closes the old one; nothing is
overwritten.

Versions are linked by `superseded_by` (old → new), the link contradictions already write, so
a chain may hold edits and contradictions alike. A chain is walked both ways with recursive
CTEs (the `ix_memories_superseded_by` index serves the backward step). Never commits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.semantic.search import MEMORY_FIELDS, SOURCE_TURNS

_VERSION_FIELDS = f"{MEMORY_FIELDS}, m.content_hash, m.subject, m.value"


def lock_memory(session: Session, memory_id: uuid.UUID, user_id: str | None) -> Any | None:
    """The memory (of this user; any user of the tenant when None), locked for this
    transaction so two edits of one version cannot both succeed."""
    return session.execute(
        text(
            f"SELECT {_VERSION_FIELDS} FROM semantic.memories AS m"  # noqa: S608
            " WHERE m.id = :id AND (CAST(:user AS text) IS NULL OR m.user_id = :user)"
            " FOR UPDATE"
        ),
        {"id": memory_id, "user": user_id},
    ).first()


_CHAIN = text(
    """
WITH RECURSIVE chain(id) AS (
    SELECT CAST(:id AS uuid)
    UNION
    SELECT m.id FROM semantic.memories AS m, chain AS c
    WHERE m.user_id = :user
      AND (m.superseded_by = c.id
           OR m.id = (SELECT x.superseded_by FROM semantic.memories AS x WHERE x.id = c.id))
)
SELECT id FROM chain
"""
)


def chain_ids(session: Session, memory_id: uuid.UUID, user_id: str) -> list[uuid.UUID]:
    """Every version linked to this memory, older and newer (the memory itself included)."""
    return list(session.execute(_CHAIN, {"id": memory_id, "user": user_id}).scalars())


def chain_head(session: Session, memory_id: uuid.UUID, user_id: str) -> Any | None:
    """The newest version reached from this one by following `superseded_by`."""
    return session.execute(
        text(
            "WITH RECURSIVE ahead(id, next, depth) AS ("  # noqa: S608
            " SELECT id, superseded_by, 0 FROM semantic.memories WHERE id = :id AND user_id = :user"
            " UNION ALL SELECT m.id, m.superseded_by, a.depth + 1"
            " FROM semantic.memories AS m JOIN ahead AS a ON m.id = a.next"
            " WHERE a.depth < 10000)"
            f" SELECT {_VERSION_FIELDS} FROM semantic.memories AS m"
            " WHERE m.id = (SELECT id FROM ahead ORDER BY depth DESC LIMIT 1)"
        ),
        {"id": memory_id, "user": user_id},
    ).first()


def versions(session: Session, ids: Sequence[uuid.UUID]) -> list[Any]:
    """The rows of these versions, oldest first (by when each became valid)."""
    if not ids:
        return []
    return list(
        session.execute(
            text(
                f"SELECT {MEMORY_FIELDS}, {SOURCE_TURNS},"  # noqa: S608
                " (SELECT p.id FROM semantic.memories AS p WHERE p.superseded_by = m.id"
                "  ORDER BY p.valid_from DESC, p.created_at DESC LIMIT 1) AS supersedes"
                " FROM semantic.memories AS m WHERE m.id = ANY(CAST(:ids AS uuid[]))"
                " ORDER BY m.valid_from, m.created_at, m.id"
            ),
            {"ids": list(ids)},
        )
    )


def holder_of_hash(session: Session, tenant_id: str, user_id: str, digest: str) -> uuid.UUID | None:
    """The user's memory holding this content hash (the unique key), if any."""
    return session.execute(
        text(
            "SELECT id FROM semantic.memories"
            " WHERE tenant_id = :tenant AND user_id = :user AND content_hash = :hash"
        ),
        {"tenant": tenant_id, "user": user_id, "hash": digest},
    ).scalar()


# Every column of the old row is copied (columns added later included) and the given ones
# replace theirs: jsonb_populate_record reads the overrides with each column's own type.
_INSERT_VERSION = text(
    "INSERT INTO semantic.memories"
    " SELECT (jsonb_populate_record(m, CAST(:overrides AS jsonb))).*"
    " FROM semantic.memories AS m WHERE m.id = :old"
)


def insert_version(session: Session, *, old_id: uuid.UUID, overrides: dict[str, Any]) -> None:
    """A copy of the old version with `overrides` applied (its own id among them)."""
    session.execute(
        _INSERT_VERSION,
        {"old": old_id, "overrides": json.dumps(overrides, default=str, ensure_ascii=False)},
    )


def close_version(session: Session, *, old_id: uuid.UUID, new_id: uuid.UUID, at: datetime) -> bool:
    """End the old version's validity and point it at its successor (once)."""
    result = session.execute(
        text(
            "UPDATE semantic.memories SET valid_to = :at, superseded_by = :new, updated_at = now()"
            " WHERE id = :old AND valid_to IS NULL"
        ),
        {"old": old_id, "new": new_id, "at": at},
    )
    return bool(getattr(result, "rowcount", 0))
