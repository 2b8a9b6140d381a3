"""SQL that takes deleted memories out of L5's recorded searches (their hits and scores).

`meta.hot_memories` is a materialized view the application role cannot refresh: it may list
a deleted id until its next scheduled refresh, and its readers join to the memories (see
app/services/forget.py). Never commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

# hit_ids and scores are parallel arrays: both are rebuilt without the deleted positions.
_DROP_HITS = text(
    """
UPDATE meta.access_patterns AS p
SET hit_ids = COALESCE(k.ids, CAST('{}' AS uuid[])),
    scores = COALESCE(k.scores, CAST('{}' AS float8[]))
FROM (
    SELECT a.id,
           array_agg(u.h ORDER BY u.n) FILTER (WHERE NOT (u.h = ANY(CAST(:ids AS uuid[]))))
               AS ids,
           array_agg(u.s ORDER BY u.n) FILTER (WHERE NOT (u.h = ANY(CAST(:ids AS uuid[]))))
               AS scores
    FROM meta.access_patterns AS a
    CROSS JOIN LATERAL unnest(a.hit_ids, a.scores) WITH ORDINALITY AS u(h, s, n)
    WHERE a.user_id = :user AND a.hit_ids && CAST(:ids AS uuid[])
    GROUP BY a.id
) AS k
WHERE p.id = k.id
"""
)


def drop_hits(*, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> int:
    """Remove these memories from the user's recorded search hits; returns records changed."""
    if not memory_ids:
        return 0
    result = session.execute(_DROP_HITS, {"user": user_id, "ids": list(memory_ids)})
    return int(getattr(result, "rowcount", 0) or 0)
