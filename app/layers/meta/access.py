"""SQL for L5 access patterns and the L3 access stats they bump. Set-based; never commits."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

_INSERT_PATTERNS = text(
    "INSERT INTO meta.access_patterns (id, tenant_id, user_id, channel, query, query_hash,"
    " hit_ids, scores, hour_of_day, created_at)"
    " SELECT r.id, :tenant, :user, r.channel, r.query, r.query_hash, r.hit_ids, r.scores,"
    " CAST(extract(hour FROM r.at AT TIME ZONE 'UTC') AS smallint), r.at"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, channel text, query text,"
    " query_hash text, hit_ids uuid[], scores float8[], at timestamptz)"
    " ON CONFLICT (id, tenant_id, created_at) DO NOTHING RETURNING id"
)


def query_hash(query: str) -> str:
    return hashlib.sha256(" ".join(query.lower().split()).encode()).hexdigest()


def insert_patterns(
    *, session: Session, tenant_id: str, user_id: str, records: Sequence[dict[str, Any]]
) -> set[str]:
    """Insert access records (ids chosen by the recorder); returns the ids new to the table."""
    if not records:
        return set()
    rows = [{**r, "query_hash": query_hash(r["query"])} for r in records]
    result = session.execute(
        _INSERT_PATTERNS, {"tenant": tenant_id, "user": user_id, "rows": json.dumps(rows)}
    )
    return {str(row[0]) for row in result}


_BUMP = text(
    "UPDATE semantic.memories AS m SET access_count = m.access_count + r.hits,"
    " last_accessed_at = GREATEST(coalesce(m.last_accessed_at, r.at), r.at)"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, hits int, at timestamptz)"
    " WHERE m.id = r.id AND m.user_id = :user"
)


def bump_memories(*, session: Session, user_id: str, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(_BUMP, {"user": user_id, "rows": json.dumps(list(rows), default=str)})


def recent_hits(
    *, session: Session, user_id: str, channel: str | None, hour: int, since: datetime, limit: int
) -> list[tuple[Any, int]]:
    """Memories this user's recent searches returned most often on this channel around this
    hour (± 1 h): what prefetch expects them to need next."""
    rows = session.execute(
        text(
            "SELECT h.memory_id, count(*) AS n FROM meta.access_patterns AS p"
            " CROSS JOIN LATERAL unnest(p.hit_ids) AS h(memory_id)"
            " WHERE p.user_id = :user AND p.created_at >= :since"
            " AND (CAST(:channel AS text) IS NULL OR p.channel = :channel)"
            " AND (abs(p.hour_of_day - :hour) <= 1 OR abs(p.hour_of_day - :hour) = 23)"
            " GROUP BY h.memory_id ORDER BY n DESC LIMIT :limit"
        ),
        {"user": user_id, "channel": channel, "hour": hour, "since": since, "limit": limit},
    ).all()
    return [(row.memory_id, int(row.n)) for row in rows]


def hot_memories(*, session: Session, user_id: str, limit: int) -> list[Any]:
    """The user's hot memories from the materialized view (through its tenant-filtered view)."""
    return list(
        session.execute(
            text(
                "SELECT memory_id FROM meta.hot_memories WHERE user_id = :user"
                " ORDER BY rank LIMIT :limit"
            ),
            {"user": user_id, "limit": limit},
        ).scalars()
    )


def memory_accesses(
    *, session: Session, user_id: str, memory_id: Any, limit: int
) -> list[datetime]:
    """When the user's searches returned this memory, newest first: the access points that
    restarted its decay clock."""
    return list(
        session.execute(
            text(
                "SELECT created_at FROM meta.access_patterns"
                " WHERE user_id = :user AND CAST(:memory AS uuid) = ANY(hit_ids)"
                " ORDER BY created_at DESC LIMIT :limit"
            ),
            {"user": user_id, "memory": memory_id, "limit": limit},
        ).scalars()
    )
