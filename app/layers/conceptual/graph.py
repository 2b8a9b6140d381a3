"""Reading the L4 graph: resolve an entity, walk its neighbourhood, find related memories.

Every statement filters by `user_id` on top of row-level security (which scopes the session to
one tenant), so one user never sees another user's graph within the same tenant.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.extraction.entities import canonicalize
from app.layers.conceptual.models import Entity

MAX_DEPTH = 4
MAX_EDGES = 500
MAX_RELATED = 500


@dataclass(frozen=True)
class GraphEdge:
    """One current relation reached from the start entity, in its stored direction.

    `weight` is the strength of the path that reached it (product of the edge weights along
    the way, this edge included); `depth` is the number of hops from the start entity."""

    source: str
    relation: str
    target: str
    weight: float
    depth: int
    source_id: uuid.UUID
    target_id: uuid.UUID
    memory_id: uuid.UUID | None


@dataclass(frozen=True)
class RelatedMemory:
    """A memory linked to the given ones by shared entities and/or a Hebbian association."""

    memory_id: uuid.UUID
    content: str
    score: float
    shared_entities: tuple[str, ...]
    association_weight: float


def find_entity(*, session: Session, user_id: str, name: str) -> Entity | None:
    """The user's entity for any spelling of its name ("Postgres", " postgres ", "POSTGRES").

    Uses the extractor's own canonicalisation, so a lookup matches exactly the key the
    entity was stored under."""
    canonical = canonicalize(name)
    if not canonical:
        return None
    return session.scalars(
        select(Entity).where(Entity.user_id == user_id, Entity.canonical_name == canonical)
    ).first()


# Entities and mentions carry no agent: what an agent may see of them follows the memories
# and turns that mention them (those tables' row-level security). An entity only another
# agent's private memory names is no entity to this reader, and a count is of what it sees.
_SEEN = (
    "SELECT count(*) FROM conceptual.mentions AS m"
    " WHERE m.user_id = {user} AND m.entity_id = {entity} AND ("
    "  EXISTS (SELECT 1 FROM semantic.memories AS mem WHERE mem.id = m.memory_id"
    "   AND mem.tenant_id = m.tenant_id AND mem.user_id = m.user_id)"
    "  OR EXISTS (SELECT 1 FROM episodic.turns AS t WHERE t.id = m.turn_id"
    "   AND t.tenant_id = m.tenant_id AND t.user_id = m.user_id))"
)
_VISIBLE_MENTIONS = text(_SEEN.format(user=":user_id", entity=":entity_id"))


def visible_mentions(*, session: Session, user_id: str, entity_id: uuid.UUID) -> int:
    """Mentions of the entity in memories and turns this transaction may read."""
    found = session.execute(_VISIBLE_MENTIONS, {"user_id": user_id, "entity_id": entity_id})
    return int(found.scalar_one())


# Edges are walked in both directions (`hop` lists each relation once per end; self-loops carry
# no neighbour and are skipped) but reported as stored. Cycle safety: a path never revisits a
# node (`path` array), and depth is bounded.
# To keep the walk linear in the graph's size rather than in its number of paths, only the
# strongest path into each node at a given depth is extended (`rank = 1`); the others are still
# reported as edges. Every edge within reach is still found: an edge is discovered from the
# first endpoint the walk reaches, whose kept path cannot contain the other endpoint. Each edge
# is reported once, at its smallest depth, with the strongest path weight found there.
# Path weight is the product of edge weights (weights live in [0, 1]): like spreading
# activation, a chain is only as strong as all its hops together, so it decays with each weak
# hop and, unlike the minimum, still separates paths that share their weakest link.
_NEIGHBOURHOOD = text(
    """
WITH RECURSIVE hop AS NOT MATERIALIZED (
    SELECT r.id, r.source_entity_id AS here, r.target_entity_id AS there, r.weight
    FROM conceptual.relations AS r
    WHERE r.user_id = :user_id AND r.valid_to IS NULL
      AND r.source_entity_id <> r.target_entity_id
    UNION ALL
    SELECT r.id, r.target_entity_id, r.source_entity_id, r.weight
    FROM conceptual.relations AS r
    WHERE r.user_id = :user_id AND r.valid_to IS NULL
      AND r.source_entity_id <> r.target_entity_id
),
walk (relation_id, node, depth, path_weight, path, rank) AS (
    SELECT h.id, h.there, 1, h.weight, ARRAY[h.here, h.there],
           row_number() OVER (PARTITION BY h.there ORDER BY h.weight DESC, h.id)
    FROM hop AS h
    JOIN conceptual.entities AS start ON start.id = h.here AND start.user_id = :user_id
    WHERE h.here = :entity_id
    UNION ALL
    SELECT h.id, h.there, w.depth + 1, w.path_weight * h.weight, w.path || h.there,
           row_number() OVER (PARTITION BY h.there ORDER BY w.path_weight * h.weight DESC, h.id)
    FROM walk AS w
    JOIN hop AS h ON h.here = w.node
    WHERE w.rank = 1 AND w.depth < :depth AND h.there <> ALL (w.path)
),
best AS (
    SELECT DISTINCT ON (relation_id) relation_id, depth, path_weight
    FROM walk
    ORDER BY relation_id, depth, path_weight DESC
)
SELECT s.name AS source, r.relation_type, t.name AS target, b.path_weight, b.depth,
       r.source_entity_id, r.target_entity_id, r.memory_id
FROM best AS b
JOIN conceptual.relations AS r ON r.id = b.relation_id AND r.user_id = :user_id
JOIN conceptual.entities AS s ON s.id = r.source_entity_id AND s.user_id = :user_id
JOIN conceptual.entities AS t ON t.id = r.target_entity_id AND t.user_id = :user_id
ORDER BY b.depth, b.path_weight DESC, s.name, r.relation_type, t.name
LIMIT :limit
"""
)


@dataclass(frozen=True)
class SeenEntity:
    """An entity with the mentions of it this transaction may read."""

    id: uuid.UUID
    name: str
    kind: str
    mention_count: int


_OF_MEMORY = text(
    "SELECT e.id, e.name, e.kind, ("  # noqa: S608
    + _SEEN.format(user="e.user_id", entity="e.id")
    + ") AS mention_count FROM conceptual.entities AS e"
    " JOIN conceptual.mentions AS n ON n.entity_id = e.id AND n.user_id = e.user_id"
    " WHERE n.memory_id = :memory_id"
    " ORDER BY mention_count DESC, e.name LIMIT :limit"
)


def entities_of_memory(
    *, session: Session, memory_id: uuid.UUID, limit: int = 50
) -> list[SeenEntity]:
    """The entities a memory mentions, most mentioned first: where its graph picture starts.
    Counts are of the mentions the reader may see (_SEEN)."""
    rows = session.execute(
        _OF_MEMORY, {"memory_id": memory_id, "limit": _clamp(limit, 1, MAX_EDGES)}
    )
    return [SeenEntity(*row) for row in rows]


def neighbourhood(
    *,
    session: Session,
    user_id: str,
    entity_id: uuid.UUID,
    depth: int = 2,
    limit: int = 50,
) -> list[GraphEdge]:
    """Current relations within `depth` hops of an entity: the facts around what was named.

    Depth is clamped to [1, 4] and limit to [1, 500], so a caller cannot ask for the whole
    graph. Ordered by depth, then path weight (strongest first)."""
    rows = session.execute(
        _NEIGHBOURHOOD,
        {
            "user_id": user_id,
            "entity_id": entity_id,
            "depth": _clamp(depth, 1, MAX_DEPTH),
            "limit": _clamp(limit, 1, MAX_EDGES),
        },
    )
    return [
        GraphEdge(
            source=source,
            relation=relation,
            target=target,
            weight=float(weight),
            depth=int(hops),
            source_id=source_id,
            target_id=target_id,
            memory_id=memory_id,
        )
        for source, relation, target, weight, hops, source_id, target_id, memory_id in rows
    ]


# Entities shared with the inputs count 1 / ln(2 + mention_count): an entity named in every
# memory (the user themself) says little about relatedness, a rare one says a lot. Hebbian
# association weights from every input are added up: a memory co-activated with several of
# the inputs is more related than one co-activated with a single one.
_RELATED = text(
    """
WITH inputs AS (
    SELECT DISTINCT unnest(CAST(:memory_ids AS uuid[])) AS memory_id
),
shared AS (
    SELECT DISTINCT mention.entity_id
    FROM conceptual.mentions AS mention
    JOIN inputs USING (memory_id)
    WHERE mention.user_id = :user_id
),
via_entities AS (
    SELECT other.memory_id,
           sum(1.0 / ln(2 + GREATEST(entity.mention_count, 0))) AS score,
           array_agg(entity.name ORDER BY entity.mention_count, entity.name) AS names
    FROM shared
    JOIN conceptual.entities AS entity
      ON entity.id = shared.entity_id AND entity.user_id = :user_id
    JOIN conceptual.mentions AS other
      ON other.entity_id = shared.entity_id AND other.user_id = :user_id
    WHERE other.memory_id IS NOT NULL
    GROUP BY other.memory_id
),
via_associations AS (
    SELECT CASE WHEN a.memory_a IN (SELECT memory_id FROM inputs) THEN a.memory_b
                ELSE a.memory_a END AS memory_id,
           sum(a.weight) AS weight
    FROM conceptual.associations AS a
    WHERE a.user_id = :user_id
      AND (a.memory_a IN (SELECT memory_id FROM inputs)
           OR a.memory_b IN (SELECT memory_id FROM inputs))
    GROUP BY 1
),
candidates AS (
    SELECT COALESCE(e.memory_id, a.memory_id) AS memory_id,
           COALESCE(e.score, 0) AS entity_score,
           COALESCE(e.names, CAST('{}' AS text[])) AS names,
           COALESCE(a.weight, 0) AS association_weight
    FROM via_entities AS e
    FULL JOIN via_associations AS a ON a.memory_id = e.memory_id
)
SELECT m.id, m.content, c.entity_score + c.association_weight AS score, c.names,
       c.association_weight
FROM candidates AS c
JOIN semantic.memories AS m ON m.id = c.memory_id AND m.user_id = :user_id
WHERE m.valid_to IS NULL AND m.archived_at IS NULL
  AND m.id NOT IN (SELECT memory_id FROM inputs)
ORDER BY score DESC, m.occurred_at DESC, m.id
LIMIT :limit
"""
)


def related_memories(
    *,
    session: Session,
    user_id: str,
    memory_ids: Sequence[uuid.UUID],
    limit: int = 20,
) -> list[RelatedMemory]:
    """Other current memories of the user that share entities with, or are associated with,
    the given ones: what to recall alongside what was just found. One statement."""
    if not memory_ids:
        return []
    rows = session.execute(
        _RELATED,
        {
            "user_id": user_id,
            "memory_ids": list(memory_ids),
            "limit": _clamp(limit, 1, MAX_RELATED),
        },
    )
    return [
        RelatedMemory(
            memory_id=memory_id,
            content=content,
            score=float(score),
            shared_entities=tuple(names),
            association_weight=float(association_weight),
        )
        for memory_id, content, score, names, association_weight in rows
    ]


_WHITESPACE = re.compile(r"\s+")


def render_facts(edges: Iterable[GraphEdge]) -> list[str]:
    """One line per edge ("alice —uses→ postgresql"), first occurrence kept, for an LLM context.

    Names are stored text from conversations, so whitespace (newlines included) is collapsed:
    a name can never open a new line in the context block."""
    lines: list[str] = []
    seen: set[str] = set()
    for edge in edges:
        line = render_fact(edge)
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return lines


def render_fact(edge: GraphEdge) -> str:
    """ "source —relation→ target", relation words spaced ("works_at" → "works at")."""
    relation = _one_line(edge.relation.replace("_", " "))
    return f"{_one_line(edge.source)} —{relation}→ {_one_line(edge.target)}"


def _one_line(value: str) -> str:
    return _WHITESPACE.sub(" ", value).strip()


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


_FACTS_ABOUT = text(
    """
WITH named AS (
    SELECT DISTINCT entity_id FROM conceptual.mentions
    WHERE user_id = :user_id AND memory_id = ANY(CAST(:memory_ids AS uuid[]))
)
SELECT s.name, r.relation_type, t.name, r.weight, r.source_entity_id, r.target_entity_id,
       r.memory_id
FROM conceptual.relations AS r
JOIN conceptual.entities AS s ON s.id = r.source_entity_id AND s.user_id = :user_id
JOIN conceptual.entities AS t ON t.id = r.target_entity_id AND t.user_id = :user_id
WHERE r.user_id = :user_id AND r.valid_to IS NULL AND r.source_entity_id <> r.target_entity_id
  AND (r.source_entity_id IN (SELECT entity_id FROM named)
       OR r.target_entity_id IN (SELECT entity_id FROM named))
ORDER BY r.weight DESC, r.mention_count DESC, s.name, t.name
LIMIT :limit
"""
)


def facts_about(
    *, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], limit: int = 20
) -> list[GraphEdge]:
    """Current relations touching an entity the memories name: the graph facts a context
    block adds beside them (depth 1, strongest first)."""
    if not memory_ids:
        return []
    rows = session.execute(
        _FACTS_ABOUT,
        {"user_id": user_id, "memory_ids": list(memory_ids), "limit": _clamp(limit, 1, MAX_EDGES)},
    )
    return [
        GraphEdge(
            source=source,
            relation=relation,
            target=target,
            weight=float(weight),
            depth=1,
            source_id=source_id,
            target_id=target_id,
            memory_id=memory_id,
        )
        for source, relation, target, weight, source_id, target_id, memory_id in rows
    ]
