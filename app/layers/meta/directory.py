"""SQL for the tenant's user directory. Users are no table of their own: a user is an id that
the episodic (turns) and semantic (memories) layers hold rows for, so the directory counts
both, one user per row, paged by user id (keyset: stable while users are added). Never
commits; runs under the tenant's row-level security scope."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.scopes import not_knowledge

# The tenant's knowledge is stored as memories of a reserved id, but it is no user.
_USERS = text(
    "SELECT u.user_id, sum(u.memories)::int AS memories, sum(u.turns)::int AS turns,"  # noqa: S608
    " max(u.last_at) AS last_at FROM ("
    "  SELECT user_id, count(*) FILTER (WHERE valid_to IS NULL AND archived_at IS NULL)"
    "   AS memories, 0 AS turns, max(created_at) AS last_at FROM semantic.memories"
    f"   WHERE {not_knowledge()} AND (CAST(:after AS text) IS NULL OR user_id > :after)"
    "   GROUP BY user_id"
    "  UNION ALL"
    "  SELECT user_id, 0, count(*), max(occurred_at) FROM episodic.turns"
    "   WHERE CAST(:after AS text) IS NULL OR user_id > :after GROUP BY user_id"
    " ) AS u GROUP BY u.user_id ORDER BY u.user_id LIMIT :limit"
)


def user_page(*, session: Session, after: str | None, limit: int) -> list[Any]:
    """Up to `limit` + 1 users after `after` (by id), with their current (neither superseded
    nor archived) memories, their turns and their latest activity; the extra row says whether
    another page exists."""
    return list(session.execute(_USERS, {"after": after, "limit": limit + 1}))
