"""SQL for decay, archiving and restoring L3 memories. Set-based; never commits.

The formula is app/scoring/decay.py's, written once here as SQL over a batch of rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

_IDLE_DAYS = (
    "GREATEST(0, extract(epoch FROM (CAST(:tick AS timestamptz) - GREATEST("
    "coalesce(m.decayed_at, m.created_at), coalesce(m.last_accessed_at, m.created_at)))) / 86400.0)"
)
_HALF_LIFE = (
    ":base_days * (1 + ln(1 + GREATEST(m.access_count, 0)))"
    " * (1 + LEAST(GREATEST(m.emotional_intensity, 0), 1))"
    " * (1 + 2 * LEAST(GREATEST(m.consolidation_strength, 0), 1))"
)
NEW_IMPORTANCE = f"m.importance * power(0.5, {_IDLE_DAYS} / ({_HALF_LIFE}))"

# One batch: some users' live memories that this tick has not reached yet. Rows already at
# this tick are skipped, which is what makes a re-run of the same tick (or a resumed one)
# change nothing twice. Only importance, decayed_at and archived_at change, none of them
# indexed, so on pages with room (fillfactor 70) the updates are HOT.
_DECAY_BATCH = text(
    "WITH changed AS (UPDATE semantic.memories AS m SET"  # noqa: S608 - constant fragments
    f"  importance = LEAST(1, GREATEST(0, {NEW_IMPORTANCE})),"
    "  decayed_at = :tick,"
    f"  archived_at = CASE WHEN {NEW_IMPORTANCE} < :floor THEN :tick END"
    "  WHERE m.tenant_id = :tenant AND m.user_id = ANY(CAST(:users AS text[]))"
    "  AND m.archived_at IS NULL AND (m.decayed_at IS NULL OR m.decayed_at < :tick)"
    "  RETURNING m.archived_at IS NOT NULL AS archived)"
    " SELECT count(*) AS n, count(*) FILTER (WHERE archived) AS archived FROM changed"
)


@dataclass(frozen=True)
class DecayBatch:
    rows: int
    archived: int


def user_sizes(*, session: Session, tenant_id: str) -> list[tuple[str, int]]:
    """Live memories per user of the tenant (an index-only count), to cut batches by."""
    return [
        (row.user_id, int(row.n))
        for row in session.execute(
            text(
                "SELECT user_id, count(*) AS n FROM semantic.memories"
                " WHERE tenant_id = :tenant AND archived_at IS NULL"
                " GROUP BY user_id ORDER BY user_id"
            ),
            {"tenant": tenant_id},
        )
    ]


def decay_batch(
    *,
    session: Session,
    tenant_id: str,
    users: Sequence[str],
    tick: datetime,
    base_days: float,
    floor: float,
) -> DecayBatch:
    row = session.execute(
        _DECAY_BATCH,
        {
            "tenant": tenant_id,
            "users": list(users),
            "tick": tick,
            "base_days": base_days,
            "floor": floor,
        },
    ).one()
    return DecayBatch(rows=int(row.n), archived=int(row.archived))


def restore(
    *, session: Session, ids: Sequence[uuid.UUID], importance: float, now: datetime
) -> list[uuid.UUID]:
    """Bring archived memories back into search, at least at `importance`, decay restarted."""
    return list(
        session.execute(
            text(
                "UPDATE semantic.memories SET archived_at = NULL, decayed_at = :now,"
                " importance = GREATEST(importance, :importance), updated_at = now()"
                " WHERE id = ANY(CAST(:ids AS uuid[])) AND archived_at IS NOT NULL RETURNING id"
            ),
            {"ids": list(ids), "importance": importance, "now": now},
        ).scalars()
    )
