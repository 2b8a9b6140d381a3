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

from app.layers.scopes import not_knowledge

# Where a memory's decay clock starts: the later of the last pass and the last access.
_CLOCK_FROM = (
    "GREATEST(coalesce(m.decayed_at, m.created_at), coalesce(m.last_accessed_at, m.created_at))"
)
_IDLE_DAYS = (
    f"GREATEST(0, extract(epoch FROM (CAST(:tick AS timestamptz) - {_CLOCK_FROM})) / 86400.0)"
)
_HALF_LIFE = (
    ":base_days * (1 + ln(1 + GREATEST(m.access_count, 0)))"
    " * (1 + LEAST(GREATEST(m.emotional_intensity, 0), 1))"
    " * (1 + 2 * LEAST(GREATEST(m.consolidation_strength, 0), 1))"
)
NEW_IMPORTANCE = f"m.importance * power(0.5, {_IDLE_DAYS} / ({_HALF_LIFE}))"

# One batch: the live memories on a range of one heap's pages (the table's, or one of its
# partitions') that this tick has not reached yet (a TID range scan: each page is read once
# per pass, whoever's rows it holds). Rows already at this tick are skipped, which is what
# makes a re-run of the same tick (or a resumed one) change nothing twice. Only importance,
# decayed_at and archived_at change, none of them indexed (and search_tsv is no generated
# column), so on pages with room the updates are HOT: no index entries, nothing recomputed.
# The tenant's knowledge is no user's memory and is used by no one in particular: it never
# decays, so it is never archived either.
_DECAY_PAGES = (
    "WITH changed AS (UPDATE {heap} AS m SET"  # noqa: S608 - constant fragments, catalog names
    f"  importance = LEAST(1, GREATEST(0, {NEW_IMPORTANCE})),"
    "  decayed_at = :tick,"
    f"  archived_at = CASE WHEN {NEW_IMPORTANCE} < :floor THEN :tick END"
    "  WHERE m.ctid >= CAST(:lo AS tid) AND m.ctid < CAST(:hi AS tid)"
    "  AND (CAST(:tenant AS text) IS NULL OR m.tenant_id = :tenant)"
    "  AND m.archived_at IS NULL AND (m.decayed_at IS NULL OR m.decayed_at < :tick)"
    f"  AND {not_knowledge('m.user_id')}"
    "  RETURNING m.archived_at IS NOT NULL AS archived)"
    " SELECT count(*) AS n, count(*) FILTER (WHERE archived) AS archived FROM changed"
)


@dataclass(frozen=True)
class DecayBatch:
    rows: int
    archived: int


@dataclass(frozen=True)
class Heap:
    """One heap holding memories: the table's, or a partition's (its name from the catalog)."""

    relation: str
    pages: int
    rows_per_page: float  # as last analysed


def heaps(*, session: Session) -> list[Heap]:
    """The heaps of semantic.memories now: its partitions' (or its own, unpartitioned)."""
    rows = session.execute(
        text(
            "SELECT CAST(p.relid AS regclass)::text AS relation,"
            " pg_relation_size(p.relid) / current_setting('block_size')::int AS pages,"
            " CASE WHEN c.relpages > 0 THEN GREATEST(c.reltuples, 0) / c.relpages ELSE 0 END"
            "  AS per_page"
            " FROM pg_partition_tree('semantic.memories') AS p"
            " JOIN pg_class AS c ON c.oid = p.relid WHERE p.isleaf ORDER BY p.relid"
        )
    ).all()
    return [Heap(row.relation, int(row.pages), float(row.per_page)) for row in rows]


def decay_pages(
    *,
    session: Session,
    heap: str,
    first_page: int,
    end_page: int,
    tick: datetime,
    base_days: float,
    floor: float,
    tenant_id: str | None = None,
) -> DecayBatch:
    row = session.execute(
        text(_DECAY_PAGES.format(heap=heap)),
        {
            "lo": f"({first_page},0)",
            "hi": f"({end_page},0)",
            "tenant": tenant_id,
            "tick": tick,
            "base_days": base_days,
            "floor": floor,
        },
    ).one()
    return DecayBatch(rows=int(row.n), archived=int(row.archived))


@dataclass(frozen=True)
class DecayState:
    """What the decay pass reads of one memory: its stored importance is the value at
    `clock_from`, and decays from there by the formula until the next access or pass."""

    id: uuid.UUID
    user_id: str
    importance: float
    access_count: int
    emotional_intensity: float
    consolidation_strength: float
    created_at: datetime
    decayed_at: datetime | None
    last_accessed_at: datetime | None
    archived_at: datetime | None
    clock_from: datetime


def decay_state(*, session: Session, memory_id: uuid.UUID) -> DecayState | None:
    """The memory's decay inputs (None when the tenant has no such memory)."""
    row = session.execute(
        text(
            "SELECT m.id, m.user_id, m.importance, m.access_count, m.emotional_intensity,"  # noqa: S608
            " m.consolidation_strength, m.created_at, m.decayed_at, m.last_accessed_at,"
            f" m.archived_at, {_CLOCK_FROM} AS clock_from"
            " FROM semantic.memories AS m WHERE m.id = :id"
        ),
        {"id": memory_id},
    ).one_or_none()
    return None if row is None else DecayState(**row._asdict())


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
