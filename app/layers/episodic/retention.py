"""SQL for L2 upkeep: summaries of closed sessions and the retention of raw events.

Set-based; never commits. Runs under one tenant's row-level security scope (the caller's unit
of work) and names the tenant as well, so the planner can use the tenant's indexes. Turns are
never deleted here: only episodic.events (typing, presence, sensors, tool runs, unknown types).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db.partitions import DailyPartitions

# Raw events are partitioned by the day they occurred on: whole days past the retention
# window go with their partition (app/services/partitions.py), the rest row by row below.
EVENT_PARTITIONS = DailyPartitions("episodic.events", "occurred_at")

_UNSUMMARISED = text(
    "SELECT id FROM episodic.sessions WHERE tenant_id = :tenant AND closed_at IS NOT NULL"
    " AND summary IS NULL AND (CAST(:after AS uuid) IS NULL OR id > :after)"
    " ORDER BY id LIMIT :limit"
)


def unsummarised_sessions(
    *, session: Session, tenant_id: str, after: uuid.UUID | None, limit: int
) -> list[uuid.UUID]:
    """Ids of closed sessions with no summary yet, in id order after `after` (keyset pages,
    so a session that cannot be written is passed over rather than read again forever)."""
    rows = session.execute(
        _UNSUMMARISED, {"tenant": tenant_id, "after": after, "limit": int(limit)}
    )
    return [row[0] for row in rows]


# The first and the last `per_session` user/assistant turns of each session (all of them in
# a shorter one), content cut at `chars`: the opening request and the conclusion of even a
# very long session, in bounded memory.
_SUMMARY_TURNS = text(
    "SELECT session_id, id, external_id, role, speaker, content, channel, occurred_at FROM ("
    " SELECT t.session_id, t.id, t.external_id, t.role, t.speaker,"
    " left(t.content, :chars) AS content, t.channel, t.occurred_at,"
    " row_number() OVER (PARTITION BY t.session_id ORDER BY t.occurred_at, t.id) AS head,"
    " row_number() OVER (PARTITION BY t.session_id ORDER BY t.occurred_at DESC, t.id DESC)"
    " AS tail"
    " FROM episodic.turns AS t WHERE t.tenant_id = :tenant"
    " AND t.session_id = ANY(CAST(:ids AS uuid[])) AND t.role IN ('user', 'assistant')"
    ") AS picked WHERE head <= :per_session OR tail <= :per_session"
    " ORDER BY session_id, occurred_at, id"
)


def summary_turns(
    *,
    session: Session,
    tenant_id: str,
    session_ids: Sequence[uuid.UUID],
    per_session: int,
    chars: int,
) -> list[Any]:
    """User and assistant turns of these sessions, oldest first within each session."""
    if not session_ids:
        return []
    return list(
        session.execute(
            _SUMMARY_TURNS,
            {
                "tenant": tenant_id,
                "ids": list(session_ids),
                "per_session": int(per_session),
                "chars": int(chars),
            },
        )
    )


# One statement per batch. Only sessions still closed and unsummarised are written, so a
# session reopened by a late turn meanwhile is left for the next pass. Topics found before
# (if any) stay first; new ones are appended in their order.
_SAVE_SUMMARIES = text(
    "UPDATE episodic.sessions AS s SET summary = r.summary,"
    " topics = s.topics || coalesce((SELECT jsonb_agg(e.topic ORDER BY e.n)"
    " FROM jsonb_array_elements(r.topics) WITH ORDINALITY AS e(topic, n)"
    " WHERE NOT s.topics @> jsonb_build_array(e.topic)), '[]'::jsonb)"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, summary text, topics jsonb)"
    " WHERE s.id = r.id AND s.tenant_id = :tenant AND s.closed_at IS NOT NULL"
    " AND s.summary IS NULL"
)


def save_summaries(*, session: Session, tenant_id: str, rows: Sequence[dict[str, Any]]) -> int:
    """rows: {"id", "summary", "topics": [...]}; returns how many sessions were written."""
    if not rows:
        return 0
    result = session.execute(
        _SAVE_SUMMARIES,
        {"tenant": tenant_id, "rows": json.dumps(list(rows), default=str, ensure_ascii=False)},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


_DELETE_EVENTS = text(
    "DELETE FROM episodic.events WHERE id IN ("
    " SELECT id FROM episodic.events WHERE tenant_id = :tenant AND occurred_at < :before"
    " LIMIT :limit)"
)


def delete_events_before(*, session: Session, tenant_id: str, before: datetime, limit: int) -> int:
    """Delete at most `limit` of the tenant's raw (non-turn) events that occurred before
    `before`; returns how many went. The caller repeats, one transaction per batch."""
    result = session.execute(
        _DELETE_EVENTS, {"tenant": tenant_id, "before": before, "limit": int(limit)}
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
