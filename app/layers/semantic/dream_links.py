"""Cross-links among the memories a cycle replayed: those that share an entity or lie close
in embedding space get an association, and the edges among memories replayed together are
strengthened (they fired together), so a graph walk from one reaches the others."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from app.layers.semantic.dream_params import IDS, as_json

_SIMILAR_PAIRS = text(
    """
WITH v AS MATERIALIZED (
    SELECT m.id, m.embedding, m.agent_id FROM semantic.memories AS m
    WHERE m.id = ANY(:ids) AND m.tenant_id = :tenant AND m.user_id = :user
      AND m.embedding IS NOT NULL
)
SELECT a.id, b.id, 1 - (a.embedding <=> b.embedding) AS cosine
FROM v AS a JOIN v AS b ON a.id < b.id AND a.agent_id IS NOT DISTINCT FROM b.agent_id
WHERE 1 - (a.embedding <=> b.embedding) >= :min_cosine
ORDER BY a.id, b.id
"""
).bindparams(bindparam("ids", type_=IDS))


def similar_pairs(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    memory_ids: Sequence[uuid.UUID],
    min_cosine: float,
) -> list[tuple[uuid.UUID, uuid.UUID, float]]:
    """Pairs (a < b) of these memories with cosine similarity ≥ min_cosine, both of one agent
    scope (so clusters, and the memories merged from them, never cross agents' maps)."""
    if len(memory_ids) < 2:
        return []
    rows = session.execute(
        _SIMILAR_PAIRS,
        {"tenant": tenant_id, "user": user_id, "ids": list(memory_ids), "min_cosine": min_cosine},
    )
    return [(a, b, float(c)) for a, b, c in rows]


# Shared entities count 1 / ln(2 + mention_count) each (as in graph.related_memories): the
# user's own name links little, a rare project name a lot. Each memory keeps its `per_memory`
# best pairs (a pair stays if it is among the best of either end), so an entity named in
# every replayed memory cannot turn the batch into a clique.
_SHARED_ENTITY_PAIRS = text(
    """
WITH mm AS MATERIALIZED (
    SELECT mn.entity_id, mn.memory_id FROM conceptual.mentions AS mn
    WHERE mn.memory_id = ANY(:ids) AND mn.tenant_id = :tenant AND mn.user_id = :user
),
ew AS MATERIALIZED (
    SELECT e.id, 1.0 / ln(2 + GREATEST(e.mention_count, 0)) AS w
    FROM conceptual.entities AS e
    WHERE e.id = ANY(ARRAY(SELECT DISTINCT entity_id FROM mm))
      AND e.tenant_id = :tenant AND e.user_id = :user
),
mw AS MATERIALIZED (
    SELECT mm.entity_id, mm.memory_id, ew.w FROM mm JOIN ew ON ew.id = mm.entity_id
),
p AS (
    SELECT x.memory_id AS a, y.memory_id AS b, sum(x.w) AS score
    FROM mw AS x
    JOIN mw AS y ON y.entity_id = x.entity_id AND x.memory_id < y.memory_id
    GROUP BY 1, 2
),
ranked AS (
    SELECT a, b, score,
           row_number() OVER (PARTITION BY a ORDER BY score DESC, b) AS rank_a,
           row_number() OVER (PARTITION BY b ORDER BY score DESC, a) AS rank_b
    FROM p
)
SELECT a, b, score FROM ranked WHERE LEAST(rank_a, rank_b) <= :per_memory ORDER BY a, b
"""
).bindparams(bindparam("ids", type_=IDS))


def shared_entity_pairs(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    memory_ids: Sequence[uuid.UUID],
    per_memory: int,
) -> list[tuple[uuid.UUID, uuid.UUID, float]]:
    """Pairs (a < b) of these memories that mention a common entity, with a rarity score."""
    if len(memory_ids) < 2:
        return []
    rows = session.execute(
        _SHARED_ENTITY_PAIRS,
        {"tenant": tenant_id, "user": user_id, "ids": list(memory_ids), "per_memory": per_memory},
    )
    return [(a, b, float(s)) for a, b, s in rows]


# Every pair gets one Hebbian step w ← w + η(1 - w) (a new edge starts at η): the given links
# (shared entity, close embeddings) and every existing edge between two of the replayed
# memories (they fired together). A pair listed twice counts once, with the origin of its
# best-ranked listing; an existing edge keeps its origin.
_LINK = text(
    """
WITH given AS (
    SELECT LEAST(r.a, r.b) AS a, GREATEST(r.a, r.b) AS b, r.origin, r.rank
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(a uuid, b uuid, origin text, rank int)
    WHERE r.a <> r.b
),
existing AS (
    SELECT e.memory_a AS a, e.memory_b AS b, e.origin, 1000 AS rank
    FROM conceptual.associations AS e
    WHERE e.memory_a = ANY(:ids) AND e.memory_b = ANY(:ids)
      AND e.tenant_id = :tenant AND e.user_id = :user
),
pairs AS (
    SELECT DISTINCT ON (a, b) a, b, origin
    FROM (SELECT * FROM given UNION ALL SELECT * FROM existing) AS x
    ORDER BY a, b, rank
),
live AS (
    SELECT m.id FROM semantic.memories AS m
    WHERE m.id = ANY(:ids) AND m.tenant_id = :tenant AND m.user_id = :user
    FOR KEY SHARE
)
INSERT INTO conceptual.associations AS e
    (tenant_id, user_id, memory_a, memory_b, weight, co_activations, origin, last_activated_at)
SELECT :tenant, :user, p.a, p.b, LEAST(1.0, :rate), 1, p.origin, :at
FROM pairs AS p
JOIN live AS la ON la.id = p.a
JOIN live AS lb ON lb.id = p.b
ON CONFLICT (memory_a, memory_b, tenant_id) DO UPDATE SET
    weight = LEAST(1.0, GREATEST(e.weight, e.weight + :rate * (1.0 - e.weight))),
    co_activations = LEAST(CAST(e.co_activations AS bigint) + 1, 2147483647),
    last_activated_at = GREATEST(e.last_activated_at, EXCLUDED.last_activated_at)
WHERE e.tenant_id = EXCLUDED.tenant_id AND e.user_id = EXCLUDED.user_id
RETURNING e.memory_a, e.memory_b, e.origin, e.weight, (e.xmax = 0) AS created
"""
).bindparams(bindparam("ids", type_=IDS))


@dataclass(frozen=True)
class LinkRow:
    memory_a: uuid.UUID
    memory_b: uuid.UUID
    origin: str
    weight: float
    created: bool


def link_replayed(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    memory_ids: Sequence[uuid.UUID],
    links: Sequence[tuple[uuid.UUID, uuid.UUID, str]],
    rate: float,
    at: datetime,
) -> list[LinkRow]:
    """One statement: cross-link the given pairs and strengthen the edges among the
    replayed memories. Returns every edge written (created or strengthened)."""
    if len(memory_ids) < 2:
        return []
    rows = session.execute(
        _LINK,
        {
            "rows": as_json(
                [{"a": a, "b": b, "origin": o, "rank": i} for i, (a, b, o) in enumerate(links)]
            ),
            "ids": list(memory_ids),
            "tenant": tenant_id,
            "user": user_id,
            "rate": rate,
            "at": at,
        },
    )
    found = [LinkRow(a, b, origin, float(w), bool(created)) for a, b, origin, w, created in rows]
    found.sort(key=lambda r: (str(r.memory_a), str(r.memory_b)))
    return found
