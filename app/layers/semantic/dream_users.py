"""Who to dream for besides the users with salience entries waiting: users with recent
never-replayed memories (explicit memories raise no salience entry), found without reading
every user's rows."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.layers.scopes import not_knowledge

# Users of one tenant with never-replayed memories dated since `since` whose cycle of the
# window starting at `window_start` has not run: a skip scan over the (tenant, user, ...)
# memories index, one probe per user (and one into the replays index for their last
# cycle). Users who never dreamt come first, then those who dreamt longest ago. The
# tenant's knowledge is no user: it is never replayed, linked or merged.
_RECENT_USERS = text(
    f"""
WITH RECURSIVE u AS (
    (SELECT m.user_id FROM semantic.memories AS m WHERE m.tenant_id = :tenant
     ORDER BY m.user_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.user_id FROM semantic.memories AS m
            WHERE m.tenant_id = :tenant AND m.user_id > u.user_id
            ORDER BY m.user_id LIMIT 1)
    FROM u WHERE u.user_id IS NOT NULL
)
SELECT u.user_id FROM u
CROSS JOIN LATERAL (
    SELECT max(r.replayed_at) AS last FROM semantic.replays AS r
    WHERE r.tenant_id = :tenant AND r.user_id = u.user_id
) AS l
WHERE u.user_id IS NOT NULL AND {not_knowledge("u.user_id")}
  AND (l.last IS NULL OR l.last < :window_start)
  AND EXISTS (SELECT 1 FROM semantic.memories AS m
              WHERE m.tenant_id = :tenant AND m.user_id = u.user_id
                AND m.occurred_at >= :since AND m.replay_count = 0
                AND m.valid_to IS NULL AND m.archived_at IS NULL)
ORDER BY l.last NULLS FIRST, u.user_id
LIMIT :limit
"""  # noqa: S608 - a constant predicate
)


def recent_users(
    *, session: Session, tenant_id: str, since: datetime, window_start: datetime, limit: int
) -> list[str]:
    """Users of the tenant with never-replayed memories dated since `since` whose cycle of
    the window starting at `window_start` has not run yet (at most `limit`, least recently
    dreamt first)."""
    rows = session.execute(
        _RECENT_USERS,
        {"tenant": tenant_id, "since": since, "window_start": window_start, "limit": limit},
    )
    return [r[0] for r in rows]
