"""The reads and writes of graph analytics (app/services/graph_analytics.py). Kept apart
from the cycle's other statements because analytics runs in its own transaction, after the
consolidation has committed, over the user's whole graph rather than the memories replayed."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from app.layers.semantic.dream_params import IDS, as_json

# The user's memory graph in one statement: the `max_nodes` most important current memories
# ('n' rows, with their importance), the associations among them ('a'; community links are
# left out: they are what analytics derives, and must not feed back into it), the entities
# they mention ('e' rows, memory and entity) and those entities' mention counts ('c').
# Associations and entities are each one scan of the user's rows, filtered by a hashed
# membership test (the `IS TRUE` keeps it a filter rather than a join the planner could
# turn into a nested loop); mentions are found per node through the memory_id index (the
# OFFSET 0 fence keeps that shape), which has no tenant index to be confused with.
_GRAPH = text(
    """
WITH nodes AS MATERIALIZED (
    SELECT m.id, m.importance FROM semantic.memories AS m
    WHERE m.tenant_id = :tenant AND m.user_id = :user
      AND m.valid_to IS NULL AND m.archived_at IS NULL
    ORDER BY m.importance DESC, m.id
    LIMIT :max_nodes
),
ments AS MATERIALIZED (
    SELECT n.id AS memory_id, mn.entity_id
    FROM nodes AS n
    CROSS JOIN LATERAL (
        SELECT mn.entity_id FROM conceptual.mentions AS mn WHERE mn.memory_id = n.id OFFSET 0
    ) AS mn
)
SELECT 'n' AS kind, n.id AS x, CAST(NULL AS uuid) AS y, n.importance AS w FROM nodes AS n
UNION ALL
SELECT 'a', e.memory_a, e.memory_b, e.weight
FROM conceptual.associations AS e
WHERE e.tenant_id = :tenant AND e.user_id = :user AND e.origin <> 'community' AND e.weight > 0
  AND (e.memory_a IN (SELECT id FROM nodes)) IS TRUE
  AND (e.memory_b IN (SELECT id FROM nodes)) IS TRUE
UNION ALL
SELECT 'e', memory_id, entity_id, NULL FROM ments
UNION ALL
SELECT 'c', en.id, NULL, en.mention_count
FROM conceptual.entities AS en
WHERE en.tenant_id = :tenant AND en.user_id = :user
  AND (en.id IN (SELECT entity_id FROM ments)) IS TRUE
ORDER BY 1, 2, 3
"""
)


@dataclass
class GraphRows:
    importance: dict[uuid.UUID, float]
    associations: list[tuple[uuid.UUID, uuid.UUID, float]]
    mentions: list[tuple[uuid.UUID, uuid.UUID, float]]  # (memory, entity, weight)


def load_graph(*, session: Session, tenant_id: str, user_id: str, max_nodes: int) -> GraphRows:
    """The graph's rows; a mention weighs 1 / ln(2 + the entity's mention count), like a
    shared entity in graph.related_memories (the user's own name links little)."""
    rows = session.execute(
        _GRAPH, {"tenant": tenant_id, "user": user_id, "max_nodes": max_nodes}
    ).all()
    graph = GraphRows(importance={}, associations=[], mentions=[])
    counts: dict[uuid.UUID, int] = {}
    for kind, x, y, w in rows:
        if kind == "n":
            graph.importance[x] = float(w)
        elif kind == "a":
            graph.associations.append((x, y, float(w)))
        elif kind == "c":
            counts[x] = max(0, int(w))
    for kind, x, y, _ in rows:
        if kind == "e" and y in counts:
            graph.mentions.append((x, y, 1.0 / math.log(2 + counts[y])))
    return graph


_RAISE_IMPORTANCE = text(
    """
WITH target AS MATERIALIZED (
    SELECT m.id, r.importance
    FROM semantic.memories AS m
    JOIN jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, importance float8)
      ON r.id = m.id
    WHERE m.id = ANY(:ids) AND m.tenant_id = :tenant AND m.user_id = :user
      AND m.importance < r.importance
)
UPDATE semantic.memories AS m SET importance = t.importance, updated_at = now()
FROM target AS t
WHERE m.id = t.id
RETURNING m.id, m.importance
"""
).bindparams(bindparam("ids", type_=IDS))


def raise_importance(
    *, session: Session, tenant_id: str, user_id: str, targets: Sequence[tuple[uuid.UUID, float]]
) -> list[tuple[uuid.UUID, float]]:
    """importance ← max(importance, target), one statement; returns the rows raised."""
    if not targets:
        return []
    rows = session.execute(
        _RAISE_IMPORTANCE,
        {
            "tenant": tenant_id,
            "user": user_id,
            "rows": as_json([{"id": i, "importance": min(1.0, max(0.0, t))} for i, t in targets]),
            "ids": [i for i, _ in targets],
        },
    )
    return sorted(((i, float(w)) for i, w in rows), key=lambda r: str(r[0]))


# A community link joins two memories that no edge joins yet; an existing edge (of any
# origin) is left exactly as it is, so re-running analytics on the same graph writes nothing.
_COMMUNITY_LINKS = text(
    """
WITH p AS (
    SELECT DISTINCT LEAST(r.a, r.b) AS a, GREATEST(r.a, r.b) AS b
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(a uuid, b uuid)
    WHERE r.a <> r.b
),
live AS (
    SELECT m.id FROM semantic.memories AS m
    WHERE m.id = ANY(:ids) AND m.tenant_id = :tenant AND m.user_id = :user
    FOR KEY SHARE
)
INSERT INTO conceptual.associations AS e
    (tenant_id, user_id, memory_a, memory_b, weight, co_activations, origin, last_activated_at)
SELECT :tenant, :user, p.a, p.b, :weight, 0, 'community', :at
FROM p JOIN live AS la ON la.id = p.a JOIN live AS lb ON lb.id = p.b
ORDER BY p.a, p.b
ON CONFLICT (memory_a, memory_b, tenant_id) DO NOTHING
RETURNING memory_a, memory_b
"""
).bindparams(bindparam("ids", type_=IDS))


def add_community_links(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    pairs: Sequence[tuple[uuid.UUID, uuid.UUID]],
    weight: float,
    at: datetime,
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    if not pairs:
        return []
    rows = session.execute(
        _COMMUNITY_LINKS,
        {
            "tenant": tenant_id,
            "user": user_id,
            "rows": as_json([{"a": a, "b": b} for a, b in pairs]),
            "ids": sorted({m for pair in pairs for m in pair}, key=str),
            "weight": weight,
            "at": at,
        },
    )
    return sorted(((a, b) for a, b in rows), key=lambda p: (str(p[0]), str(p[1])))
