"""Replay selection: which memories a salience entry stands for, which entries a cycle has
consumed (so they can be acked), and the replays written to the dream stream for readers
that follow the cycle."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import redis

from app.keys import DreamKeys
from app.layers.semantic import dream as dream_sql
from app.scoring.replay import RankedReplay, ReplayCandidate
from app.services.dream_routing import SalienceEntry

DREAM_STREAM_MAX_LEN = 100_000
STALE_ENTRY_S = 7 * 86_400  # an entry whose turn gave no memory by then is dropped


def covered(
    entries: Sequence[SalienceEntry],
    turns: dict[uuid.UUID, list[dream_sql.TurnMemory]],
    replayed: set[uuid.UUID],
    now: datetime,
) -> list[str]:
    """Entries whose effect is done: every memory of their turn replayed, or no memory and
    none to come (or too old to wait for)."""
    out: list[str] = []
    for entry in entries:
        rows = turns.get(entry.turn_id, [])
        memories = {r.memory.memory_id for r in rows if r.memory is not None}
        if memories:
            if memories <= replayed:
                out.append(entry.entry_id)
        elif any(r.settled for r in rows) or (now - entry.at).total_seconds() > STALE_ENTRY_S:
            out.append(entry.entry_id)
    return out


def candidates(
    entries: Sequence[SalienceEntry], turns: dict[uuid.UUID, list[dream_sql.TurnMemory]]
) -> list[ReplayCandidate]:
    found: list[ReplayCandidate] = []
    for entry in entries:
        for row in turns.get(entry.turn_id, []):
            m = row.memory
            if m is None:
                continue
            found.append(
                ReplayCandidate(
                    memory_id=m.memory_id,
                    kind=m.kind,
                    emotional_intensity=max(m.emotional_intensity, entry.emotional_intensity),
                    occurred_at=m.occurred_at,
                    tags=m.tags,
                    source="salience",
                )
            )
    return found


def xadd_replays(
    client: redis.Redis,
    keys: DreamKeys,
    tenant_id: str,
    user_id: str,
    cycle_id: uuid.UUID,
    ranked: Sequence[RankedReplay],
) -> None:
    if not ranked:
        return
    pipe = client.pipeline(transaction=False)
    for r in ranked:
        pipe.xadd(
            keys.stream(),
            {
                "tenant_id": tenant_id,
                "user_id": user_id,
                "cycle_id": str(cycle_id),
                "memory_id": str(r.candidate.memory_id),
                "priority": f"{r.priority:.6f}",
                "source": r.candidate.source,
            },
            maxlen=DREAM_STREAM_MAX_LEN,
            approximate=True,
        )
    pipe.execute()
