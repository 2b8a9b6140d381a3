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

# One batch: the next `limit` live memories of the tenant (by id, after `after`) that this
# tick has not reached yet. Rows already at this tick are skipped, which is what makes a
# re-run of the same tick (or a resumed one) change nothing twice.
_DECAY_BATCH = text(
    "WITH batch AS (SELECT id FROM semantic.memories"  # noqa: S608 - constant fragments
    "  WHERE tenant_id = :tenant AND archived_at IS NULL AND id > :after"
    "  AND (decayed_at IS NULL OR decayed_at < :tick)"
    "  ORDER BY id LIMIT :limit),"
    " changed AS (UPDATE semantic.memories AS m SET"
    f"  importance = LEAST(1, GREATEST(0, {NEW_IMPORTANCE})),"
    "  decayed_at = :tick,"
    f"  archived_at = CASE WHEN {NEW_IMPORTANCE} < :floor THEN :tick END"
    "  FROM batch WHERE m.id = batch.id"
    "  RETURNING m.id, m.archived_at IS NOT NULL AS archived)"
    " SELECT (SELECT id FROM changed ORDER BY id DESC LIMIT 1) AS last,"
    " (SELECT count(*) FROM changed) AS n,"
    " (SELECT count(*) FROM changed WHERE archived) AS archived"
)


@dataclass(frozen=True)
class DecayBatch:
    last_id: uuid.UUID | None
    rows: int
    archived: int


def decay_batch(
    *,
    session: Session,
    tenant_id: str,
    tick: datetime,
    after: uuid.UUID,
    limit: int,
    base_days: float,
    floor: float,
) -> DecayBatch:
    row = session.execute(
        _DECAY_BATCH,
        {
            "tenant": tenant_id,
            "tick": tick,
            "after": after,
            "limit": limit,
            "base_days": base_days,
            "floor": floor,
        },
    ).one()
    return DecayBatch(last_id=row.last, rows=int(row.n), archived=int(row.archived))


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
