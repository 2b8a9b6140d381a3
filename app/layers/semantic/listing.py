"""SQL for paging through a user's memories, newest first, by keyset (stable under inserts)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.semantic.search import MEMORY_FIELDS, SOURCE_TURNS

# A cursor is the last row's time (microseconds since the epoch) and id: text a pattern
# describes whole, so the OpenAPI document can say which cursors exist.
CURSOR_PATTERN = r"^[0-9]{1,16}_[0-9a-f]{32}$"
_CURSOR = re.compile(CURSOR_PATTERN)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode_cursor(row: Any) -> str:
    micros = (row.occurred_at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}_{row.id.hex}"


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Raises ValueError for anything that is not a cursor this module made."""
    if _CURSOR.fullmatch(cursor) is None:
        raise ValueError("bad cursor: pass back a next_cursor as it was given")
    micros, memory_id = cursor.split("_")
    return _EPOCH + timedelta(microseconds=int(micros)), uuid.UUID(hex=memory_id)


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
