"""Replay receipts: a receipt per (cycle, memory) goes in before any effect, so a cycle
resumed any number of times strengthens each memory once, and a cycle whose receipts exist is
known to have committed its consolidation."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from app.layers.semantic.dream_params import IDS, as_json


def receipts(*, session: Session, cycle_id: uuid.UUID) -> set[uuid.UUID]:
    """Memories replayed by this cycle already (empty: its consolidation has not committed)."""
    rows = session.execute(
        text("SELECT memory_id FROM semantic.replays WHERE cycle_id = :cycle"), {"cycle": cycle_id}
    )
    return {r[0] for r in rows}


def cycles_done(*, session: Session, cycle_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these cycles (of the session's tenant) have committed their consolidation."""
    if not cycle_ids:
        return set()
    rows = session.execute(
        text(
            "SELECT c.id FROM unnest(:ids) AS c(id)"
            " WHERE EXISTS (SELECT 1 FROM semantic.replays AS r WHERE r.cycle_id = c.id)"
        ).bindparams(bindparam("ids", type_=IDS)),
        {"ids": list(cycle_ids)},
    )
    return {r[0] for r in rows}


# Receipts first; only memories whose receipt is new here are strengthened. Memories are
# key-share locked while the receipts go in, so one deleted meanwhile is skipped (no
# foreign-key error) rather than half-replayed.
_REPLAY = text(
    """
WITH r AS (
    SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(memory_id uuid, priority float8)
),
live AS (
    SELECT m.id FROM semantic.memories AS m
    WHERE m.id = ANY(:ids) AND m.tenant_id = :tenant AND m.user_id = :user
    FOR KEY SHARE
),
receipt AS (
    INSERT INTO semantic.replays (tenant_id, user_id, cycle_id, memory_id, priority, replayed_at)
    SELECT :tenant, :user, :cycle, r.memory_id, r.priority, :at
    FROM r JOIN live ON live.id = r.memory_id
    ON CONFLICT (cycle_id, memory_id, tenant_id) DO NOTHING
    RETURNING memory_id
)
UPDATE semantic.memories AS m SET
    consolidation_strength = LEAST(1.0, GREATEST(m.consolidation_strength,
        m.consolidation_strength + :gain * (1.0 - m.consolidation_strength))),
    replay_count = m.replay_count + 1,
    updated_at = now()
FROM receipt
WHERE m.id = receipt.memory_id
RETURNING m.id
"""
).bindparams(bindparam("ids", type_=IDS))


def replay(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    cycle_id: uuid.UUID,
    at: datetime,
    replays: Sequence[tuple[uuid.UUID, float]],
    gain: float,
) -> list[uuid.UUID]:
    """Receipt each (memory, priority) for the cycle; the memories whose receipt was new get
    consolidation strength s + gain(1 - s) and one more replay. Returns those memories."""
    if not replays:
        return []
    rows = session.execute(
        _REPLAY,
        {
            "rows": as_json([{"memory_id": m, "priority": p} for m, p in replays]),
            "ids": [m for m, _ in replays],
            "tenant": tenant_id,
            "user": user_id,
            "cycle": cycle_id,
            "at": at,
            "gain": gain,
        },
    )
    return sorted((r[0] for r in rows), key=str)
