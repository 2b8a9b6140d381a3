"""What the memory console shows an operator about one tenant: its users, a memory's
importance over time, the entities a memory mentions, and the tenant's recent job runs.

Every read runs under the tenant's row-level security scope, so another tenant's memory is
simply not found. The importance curve is the decay job's own formula (app/scoring/decay.py,
whose SQL twin the pass runs and a test holds equal) applied from the memory's decay clock:
the stored importance is its value when the clock last restarted (a pass or an access), and
the pass multiplies it by 0.5 ^ (idle days / half-life) from there, so sampling the formula
over time is exactly what the hourly passes will store, tick by tick.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.conceptual.graph import entities_of_memory
from app.layers.meta import access, directory
from app.layers.semantic.decay import DecayState, decay_state
from app.scoring.decay import decayed, half_life_days
from app.services.jobs import recent_runs

DAY_S = 86_400.0
MAX_HORIZON_DAYS = 3650.0
MIN_HORIZON_DAYS = 7.0
MAX_ACCESS_POINTS = 200


@dataclass(frozen=True)
class UserSummary:
    user_id: str
    memories: int
    turns: int
    last_at: datetime | None


@dataclass(frozen=True)
class UserPage:
    users: list[UserSummary]
    next_cursor: str | None


def list_users(tenant_id: str, *, limit: int, after: str | None) -> UserPage:
    """The tenant's users by id, with counts, a page at a time (`after`: the last id seen)."""
    with unit_of_work(tenant_id) as session:
        rows = directory.user_page(session=session, after=after, limit=limit)
    users = [
        UserSummary(
            user_id=r.user_id, memories=int(r.memories), turns=int(r.turns), last_at=r.last_at
        )
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    return UserPage(users=users, next_cursor=users[-1].user_id if more and users else None)


@dataclass(frozen=True)
class CurvePoint:
    at: datetime
    importance: float


@dataclass
class ImportanceCurve:
    """A memory's importance from its decay clock onward, as the decay job will store it."""

    memory_id: uuid.UUID
    user_id: str
    importance: float  # as stored: the value at `clock_from`
    importance_now: float
    half_life_days: float
    base_half_life_days: float
    floor: float
    access_count: int
    created_at: datetime
    decayed_at: datetime | None
    last_accessed_at: datetime | None
    clock_from: datetime
    now: datetime
    archived_at: datetime | None
    # When the projection falls under the floor (the pass after that archives it); None if
    # it is archived already.
    archive_at: datetime | None
    accesses: list[datetime] = field(default_factory=list)
    curve: list[CurvePoint] = field(default_factory=list)


def importance_curve(
    settings: Settings,
    tenant_id: str,
    memory_id: uuid.UUID,
    *,
    horizon_days: float | None = None,
    points: int = 60,
    now: datetime | None = None,
) -> ImportanceCurve | None:
    """The memory's past access points and its projected decay, `points` samples from its
    decay clock to `horizon_days` past now (default: until it would be archived, within
    [7, 3650] days). None when the tenant has no such memory."""
    now = now or datetime.now(UTC)
    with unit_of_work(tenant_id) as session:
        state = decay_state(session=session, memory_id=memory_id)
        if state is None:
            return None
        accesses = access.memory_accesses(
            session=session, user_id=state.user_id, memory_id=memory_id, limit=MAX_ACCESS_POINTS
        )
    half_life = half_life_days(
        settings.decay_half_life_days,
        access_count=state.access_count,
        emotional_intensity=state.emotional_intensity,
        consolidation=state.consolidation_strength,
    )
    archive_at = None if state.archived_at else _crossing(state, half_life, settings.decay_floor)
    if horizon_days is None:
        until_archive = (archive_at - now).total_seconds() / DAY_S if archive_at else 0.0
        horizon_days = min(max(until_archive * 1.1, MIN_HORIZON_DAYS), MAX_HORIZON_DAYS)
    end = now + timedelta(days=horizon_days)
    return ImportanceCurve(
        memory_id=state.id,
        user_id=state.user_id,
        importance=state.importance,
        importance_now=_at(state, half_life, now),
        half_life_days=half_life,
        base_half_life_days=settings.decay_half_life_days,
        floor=settings.decay_floor,
        access_count=state.access_count,
        created_at=state.created_at,
        decayed_at=state.decayed_at,
        last_accessed_at=state.last_accessed_at,
        clock_from=state.clock_from,
        now=now,
        archived_at=state.archived_at,
        archive_at=archive_at,
        accesses=accesses,
        curve=_sample(state, half_life, end, points),
    )


def _at(state: DecayState, half_life: float, when: datetime) -> float:
    """Importance at `when`: what a pass at that tick would store (archived rows stay put)."""
    if state.archived_at is not None:
        return state.importance
    idle = (when - state.clock_from).total_seconds() / DAY_S
    return decayed(state.importance, idle_days=idle, half_life=half_life)


def _crossing(state: DecayState, half_life: float, floor: float) -> datetime | None:
    """When the formula takes the importance under the floor (inverted in closed form);
    None with no floor, as nothing decays under zero."""
    if floor <= 0:
        return None
    if state.importance <= floor:
        return state.clock_from
    days = half_life * math.log2(state.importance / floor)
    return state.clock_from + timedelta(days=min(days, 100 * MAX_HORIZON_DAYS))


def _sample(state: DecayState, half_life: float, end: datetime, points: int) -> list[CurvePoint]:
    start = state.clock_from
    if end <= start:
        return [CurvePoint(at=start, importance=state.importance)]
    step = (end - start) / (points - 1)
    return [
        CurvePoint(at=start + step * i, importance=_at(state, half_life, start + step * i))
        for i in range(points)
    ]


@dataclass(frozen=True)
class EntityRef:
    id: uuid.UUID
    name: str
    kind: str
    mention_count: int


def memory_entities(tenant_id: str, memory_id: uuid.UUID) -> list[EntityRef] | None:
    """The entities the memory mentions; None when the tenant has no such memory."""
    with unit_of_work(tenant_id) as session:
        if decay_state(session=session, memory_id=memory_id) is None:
            return None
        found = entities_of_memory(session=session, memory_id=memory_id)
        return [
            EntityRef(id=e.id, name=e.name, kind=e.kind, mention_count=e.mention_count)
            for e in found
        ]


def tenant_jobs(tenant_id: str, *, limit: int) -> list[dict[str, Any]]:
    """The tenant's latest job runs. Runs recorded under the tenant only: the passes that span
    every tenant at once (decay, the hot-memories refresh) are recorded as tenant `*`, and
    their row counts are every tenant's, so they are not shown to one tenant."""
    return [
        {
            "job": run.job,
            "scope": run.scope,
            "status": run.status,
            "rows": run.rows,
            "errors": run.errors,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "error": run.error,
        }
        for run in recent_runs(tenant_id, limit=limit)
    ]
