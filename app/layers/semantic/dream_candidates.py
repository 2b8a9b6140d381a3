"""What a dream cycle may replay: the memories extracted from the turns attention tagged,
and the user's salient memories no cycle replayed lately (explicit memories carry no salience
entry, and would otherwise never consolidate)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from app.layers.semantic.dream_params import IDS


@dataclass(frozen=True)
class CandidateRow:
    """A memory that may be replayed, with what its replay priority needs."""

    memory_id: uuid.UUID
    kind: str
    emotional_intensity: float
    occurred_at: datetime
    tags: tuple[str, ...]


@dataclass(frozen=True)
class TurnMemory:
    """A consolidation-tagged turn and one memory extracted from it (None: none yet).

    `settled`: no memory is still to come from the turn (its extraction batch is stored or
    failed, or the turn is gone), so an entry finding no memory can be dropped."""

    turn_id: uuid.UUID
    settled: bool
    memory: CandidateRow | None


# One pass over the user's rows whose sources overlap the turns (array overlap), then each
# turn with the memories extracted from it (a consolidated memory inherits its members'
# sources but was not extracted from them); a turn no current memory came from says whether
# one may still come (its extraction batch is over, or the turn is not the user's any more).
_TURN_MEMORIES = text(
    """
WITH t AS (
    SELECT DISTINCT g.turn_id FROM unnest(:turns) AS g(turn_id)
),
hit AS MATERIALIZED (
    SELECT m.id, s.turn_id, m.kind, m.emotional_intensity, m.occurred_at, m.tags
    FROM semantic.memories AS m
    CROSS JOIN LATERAL unnest(m.source_turn_ids) AS s(turn_id)
    WHERE m.tenant_id = :tenant AND m.user_id = :user
      AND m.source_turn_ids && :turns AND m.kind <> 'consolidated'
      AND m.valid_to IS NULL AND m.archived_at IS NULL
      AND s.turn_id = ANY(:turns)
),
tu AS MATERIALIZED (
    SELECT tu.id, tu.user_id, tu.extraction_batch_id FROM episodic.turns AS tu
    WHERE tu.id = ANY(:turns) AND tu.tenant_id = :tenant AND tu.user_id = :user
),
b AS MATERIALIZED (
    SELECT b.id, b.state FROM semantic.extraction_batches AS b
    WHERE b.id = ANY(ARRAY(SELECT tu.extraction_batch_id FROM tu
                           WHERE tu.extraction_batch_id IS NOT NULL))
)
SELECT t.turn_id,
       (tu.id IS NULL OR tu.user_id <> :user OR b.state IN ('stored', 'failed')) AS settled,
       hit.id, hit.kind, hit.emotional_intensity, hit.occurred_at, hit.tags
FROM t
LEFT JOIN tu ON tu.id = t.turn_id
LEFT JOIN b ON b.id = tu.extraction_batch_id
LEFT JOIN hit ON hit.turn_id = t.turn_id
ORDER BY t.turn_id, hit.id
"""
).bindparams(bindparam("turns", type_=IDS))


def memories_of_turns(
    *, session: Session, tenant_id: str, user_id: str, turn_ids: Sequence[uuid.UUID]
) -> list[TurnMemory]:
    """The user's current memories extracted from these turns, one row per (turn, memory)."""
    if not turn_ids:
        return []
    rows = session.execute(
        _TURN_MEMORIES, {"tenant": tenant_id, "user": user_id, "turns": list(turn_ids)}
    )
    out: list[TurnMemory] = []
    for turn_id, settled, memory_id, kind, emotional, occurred_at, tags in rows:
        memory = (
            None
            if memory_id is None
            else CandidateRow(memory_id, kind, float(emotional), occurred_at, tuple(tags or ()))
        )
        out.append(TurnMemory(turn_id, bool(settled), memory))
    return out


# Explicit memories carry no salience entry: the user's most salient (then most important)
# current memories that no cycle replayed since `since` also get their turn.
_RECENTLY_REPLAYED = text(
    "SELECT DISTINCT memory_id FROM semantic.replays"
    " WHERE tenant_id = :tenant AND user_id = :user AND replayed_at >= :since"
)

_EXPLICIT = text(
    """
SELECT m.id, m.kind, m.emotional_intensity, m.occurred_at, m.tags
FROM semantic.memories AS m
WHERE m.tenant_id = :tenant AND m.user_id = :user
  AND m.valid_to IS NULL AND m.archived_at IS NULL
  AND m.id <> ALL(:recent)
ORDER BY m.salience DESC, m.importance DESC, m.occurred_at DESC, m.id
LIMIT :limit
"""
).bindparams(bindparam("recent", type_=IDS))


def explicit_candidates(
    *, session: Session, tenant_id: str, user_id: str, since: datetime, limit: int
) -> list[CandidateRow]:
    params = {"tenant": tenant_id, "user": user_id}
    recent = list(session.execute(_RECENTLY_REPLAYED, {**params, "since": since}).scalars())
    rows = session.execute(_EXPLICIT, {**params, "recent": recent, "limit": limit})
    return [
        CandidateRow(memory_id, kind, float(emotional), occurred_at, tuple(tags or ()))
        for memory_id, kind, emotional, occurred_at, tags in rows
    ]
