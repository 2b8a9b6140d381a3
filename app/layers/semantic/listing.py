"""SQL for paging through a user's memories, newest first, by keyset (stable under inserts)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.semantic.search import MEMORY_FIELDS, SOURCE_TURNS


def encode_cursor(row: Any) -> str:
    raw = json.dumps([row.occurred_at.isoformat(), str(row.id)])
    return base64.urlsafe_b64encode(raw.encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Raises ValueError for anything that is not a cursor this module made."""
    try:
        at, memory_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return datetime.fromisoformat(at), uuid.UUID(memory_id)
    except (TypeError, ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"bad cursor: {exc}") from None


def page(
    session: Session,
    user_id: str,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
    include_superseded: bool,
) -> list[Any]:
    """Up to limit + 1 rows (the extra one says whether another page exists)."""
    return list(
        session.execute(
            text(
                f"SELECT {MEMORY_FIELDS}, {SOURCE_TURNS} FROM semantic.memories AS m"  # noqa: S608
                " WHERE m.user_id = :user AND m.archived_at IS NULL"
                " AND (:superseded OR m.valid_to IS NULL)"
                " AND (CAST(:at AS timestamptz) IS NULL"
                "  OR (m.occurred_at, m.id) < (CAST(:at AS timestamptz), CAST(:id AS uuid)))"
                " ORDER BY m.occurred_at DESC, m.id DESC LIMIT :limit"
            ),
            {
                "user": user_id,
                "superseded": include_superseded,
                "at": after[0] if after else None,
                "id": after[1] if after else None,
                "limit": limit + 1,
            },
        )
    )
