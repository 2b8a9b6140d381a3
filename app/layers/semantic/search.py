"""SQL for searching L3: dense (HNSW) and full-text candidates under one filter, and the rows.

The filter is the same for both rankings, so fusion never mixes in a memory the caller
excluded. pgvector's iterative index scan keeps returning neighbours until `LIMIT` rows pass
the user filter, so a filtered ANN query does not come back short (relaxed order is
re-sorted by the exact distance in the outer query).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db.fulltext import FulltextScope, bm25_candidates
from app.db.nearest import nearest
from app.db.rows import fetch


@dataclass(frozen=True)
class MemoryFilter:
    """What a search may return; tenant scoping is also enforced by row-level security."""

    tenant_id: str
    user_id: str
    channel: str | None = None
    tags: Sequence[str] = ()
    kinds: Sequence[str] = ()
    since: datetime | None = None
    until: datetime | None = None
    min_importance: float | None = None
    include_superseded: bool = False
    include_archived: bool = False
    exclude_ids: Sequence[uuid.UUID] = field(default_factory=tuple)

    def clause(self, alias: str = "") -> tuple[str, dict[str, Any]]:
        """SQL predicate over semantic.memories (built from fixed fragments) and its params;
        `alias` prefixes the columns ("m." when the table is aliased)."""
        a = alias
        parts = [f"{a}tenant_id = :tenant", f"{a}user_id = :user"]
        params: dict[str, Any] = {"tenant": self.tenant_id, "user": self.user_id}
        if not self.include_archived:
            parts.append(f"{a}archived_at IS NULL")
        if not self.include_superseded:
            parts.append(f"{a}valid_to IS NULL")
        if self.channel is not None:
            parts.append(f"{a}channel = :channel")
            params["channel"] = self.channel
        if self.tags:
            parts.append(f"{a}tags && CAST(:tags AS text[])")
            params["tags"] = list(self.tags)
        if self.kinds:
            parts.append(f"{a}kind = ANY(CAST(:kinds AS text[]))")
            params["kinds"] = list(self.kinds)
        if self.since is not None:
            parts.append(f"{a}occurred_at >= :since")
            params["since"] = self.since
        if self.until is not None:
            parts.append(f"{a}occurred_at < :until")
            params["until"] = self.until
        if self.min_importance is not None:
            parts.append(f"{a}importance >= :min_importance")
            params["min_importance"] = self.min_importance
        if self.exclude_ids:
            parts.append(f"NOT ({a}id = ANY(CAST(:exclude AS uuid[])))")
            params["exclude"] = list(self.exclude_ids)
        return " AND ".join(parts), params

    def size_clause(self) -> str | None:
        """A predicate the (tenant, user, occurred_at) index answers alone, holding the rows
        `clause` does, when the filter narrows no further than that (see app/db/nearest.py)."""
        if self.channel or self.tags or self.kinds or self.exclude_ids:
            return None
        if self.min_importance is not None:
            return None
        parts = ["tenant_id = :tenant", "user_id = :user"]
        if self.since is not None:
            parts.append("occurred_at >= :since")
        if self.until is not None:
            parts.append("occurred_at < :until")
        return " AND ".join(parts)


def dense_candidates(
    session: Session,
    memory_filter: MemoryFilter,
    vector: Sequence[float],
    *,
    limit: int,
    ef_search: int,
    exact: bool = False,
) -> dict[uuid.UUID, float]:
    """id → cosine similarity of the `limit` nearest memories passing the filter.

    `exact` disables the index for this transaction: the ground truth ANN recall is
    measured against."""
    where, params = memory_filter.clause()
    return nearest(
        session,
        "semantic.memories",
        where,
        params,
        vector,
        limit=limit,
        ef_search=ef_search,
        exact=exact,
        size_where=memory_filter.size_clause(),
    )


def lexical_candidates(
    session: Session, memory_filter: MemoryFilter, query: str, *, limit: int
) -> dict[uuid.UUID, float]:
    """id → BM25 score over the user's memories in the filter."""
    where, params = memory_filter.clause()
    scope = FulltextScope(
        table="semantic.memories",
        vector="search_tsv",
        where=where,
        size_where="tenant_id = :tenant AND user_id = :user",
        order="occurred_at DESC, id DESC",
    )
    f = memory_filter

    return bm25_candidates(
        session,
        scope,
        params,
        query=query,
        limit=limit,
        match=_MATCH,
        match_params={
            "tenant": f.tenant_id,
            "user": f.user_id,
            "superseded": f.include_superseded,
            "archived": f.include_archived,
            "channel": f.channel,
            "tags": list(f.tags) or None,
            "kinds": list(f.kinds) or None,
            "since": f.since,
            "until": f.until,
            "min_importance": f.min_importance,
            "exclude": list(f.exclude_ids) or None,
        },
    )


# The index-backed match under the tenant's scope (see the recall migration for why).
_MATCH = (
    "semantic.match_memories(:tenant, :user, CAST(:tsq AS tsquery), :limit,"
    " :superseded, :archived, CAST(:channel AS text), CAST(:tags AS text[]),"
    " CAST(:kinds AS text[]), CAST(:since AS timestamptz), CAST(:until AS timestamptz),"
    " CAST(:min_importance AS double precision), CAST(:exclude AS uuid[]))"
)


def covering_memories(
    session: Session, memory_filter: MemoryFilter, turn_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[uuid.UUID]]:
    """turn id → ids of memories in the filter that were extracted from it."""
    if not turn_ids:
        return {}
    where, params = memory_filter.clause("m.")
    rows = fetch(
        session,
        "SELECT m.id, t.turn_id FROM semantic.memories AS m"  # noqa: S608
        " CROSS JOIN LATERAL unnest(m.source_turn_ids) AS t(turn_id)"
        f" WHERE {where}"
        " AND m.source_turn_ids && CAST(:turns AS uuid[])"
        " AND t.turn_id = ANY(CAST(:turns AS uuid[]))",
        {**params, "turns": list(turn_ids)},
    )
    covered: dict[uuid.UUID, list[uuid.UUID]] = {}
    for row in rows:
        covered.setdefault(row.turn_id, []).append(row.id)
    return covered


MEMORY_FIELDS = (
    "m.id, m.user_id, m.kind, m.content, m.summary, m.topics, m.tags, m.importance,"
    " m.emotional_intensity, m.consolidation_strength, m.access_count, m.occurred_at,"
    " m.valid_from, m.valid_to, m.superseded_by, m.archived_at, m.session_id, m.channel,"
    " m.source_turn_ids, m.original, m.metadata, m.created_at, m.agent_id, m.shared"
)

# The memory's source turns (ids and the producers' external ids), in the memory's order:
# its user's own turns, read in that user's partition of the trace.
SOURCE_TURNS = (
    "ARRAY(SELECT t.external_id FROM episodic.turns AS t WHERE t.user_id = m.user_id"
    " AND t.id = ANY(m.source_turn_ids)"
    " ORDER BY array_position(m.source_turn_ids, t.id)) AS source_external_ids,"
    " ARRAY(SELECT t.id FROM episodic.turns AS t WHERE t.user_id = m.user_id"
    " AND t.id = ANY(m.source_turn_ids)"
    " ORDER BY array_position(m.source_turn_ids, t.id)) AS source_ids"
)


def memories_by_id(
    session: Session,
    user_id: str | None,
    ids: Sequence[uuid.UUID],
    *,
    sources: bool = True,
    tenant_id: str | None = None,
) -> dict[uuid.UUID, Any]:
    """The rows for these ids (of this user; any user of the tenant when None), each with its
    source turns' ids and external ids (empty lists with `sources=False`: the turns unit
    already knows them, and two subqueries per memory are most of this read's cost). With
    the tenant and the user named, the read is of their partition alone (see _own_by_id)."""
    if not ids:
        return {}
    turns = SOURCE_TURNS if sources else _NO_SOURCE_TURNS
    owner = (
        "m.tenant_id = :tenant AND m.user_id = :user"
        if tenant_id is not None and user_id is not None
        else "(CAST(:user AS text) IS NULL OR m.user_id = :user)"
    )
    rows = fetch(
        session,
        f"SELECT {MEMORY_FIELDS}, {turns}"  # noqa: S608
        f" FROM semantic.memories AS m WHERE {owner} AND m.id = ANY(CAST(:ids AS uuid[]))",
        {"tenant": tenant_id, "user": user_id, "ids": list(ids)},
    )
    return {row.id: row for row in rows}


def memory_keys(
    session: Session, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Any]:
    """id → (source_turn_ids, importance, consolidation_strength, occurred_at) of the
    user's memories: the turns each found memory points at, and what the prior of a pool of
    hits needs, in one read before the whole rows of the few that are returned are read
    (memories_by_id)."""
    columns = "source_turn_ids, importance, consolidation_strength, occurred_at"
    return {row.id: row for row in _own_by_id(session, tenant_id, user_id, ids, columns)}


_NO_SOURCE_TURNS = "CAST('{}' AS text[]) AS source_external_ids, CAST('{}' AS uuid[]) AS source_ids"


def memory_embeddings(
    session: Session, user_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, np.ndarray]:
    """Stored vectors for these memories (prefetch ranks cached candidates with them)."""
    if not ids:
        return {}
    rows = session.execute(
        text(
            "SELECT id, CAST(embedding AS text) AS v FROM semantic.memories"
            " WHERE user_id = :user AND id = ANY(CAST(:ids AS uuid[])) AND embedding IS NOT NULL"
        ),
        {"user": user_id, "ids": list(ids)},
    ).all()
    return {row.id: np.fromstring(row.v[1:-1], sep=",", dtype=np.float32) for row in rows}


def recent_memory_ids(
    session: Session, user_id: str, *, limit: int, exclude: Sequence[uuid.UUID] = ()
) -> list[uuid.UUID]:
    """The user's current memories, most recent first (prefetch fills up with these)."""
    return list(
        session.execute(
            text(
                "SELECT id FROM semantic.memories WHERE user_id = :user AND valid_to IS NULL"
                " AND archived_at IS NULL AND NOT (id = ANY(CAST(:exclude AS uuid[])))"
                " ORDER BY occurred_at DESC LIMIT :limit"
            ),
            {"user": user_id, "exclude": list(exclude), "limit": max(limit - len(exclude), 0)},
        ).scalars()
    )


def _own_by_id(
    session: Session, tenant_id: str, user_id: str, ids: Sequence[uuid.UUID], columns: str
) -> list[Any]:
    """id and `columns` (a fixed list) of the user's memories with these ids.

    The tenant and the user are named: memories are hash-partitioned by both, so the planner
    reads the one partition (the row-level-security check alone is known only when the
    statement runs), and the primary key (id, tenant_id, user_id) finds each row there."""
    if not ids:
        return []
    return fetch(
        session,
        f"SELECT id, {columns} FROM semantic.memories"  # noqa: S608
        " WHERE tenant_id = :tenant AND user_id = :user AND id = ANY(CAST(:ids AS uuid[]))",
        {"tenant": tenant_id, "user": user_id, "ids": list(ids)},
    )
