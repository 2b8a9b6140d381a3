"""SQL for the dream cycle: replay candidates, receipts, cross-links, merged clusters, and the
reads and writes of graph analytics. Set-based (one statement per step, whatever the batch)
and never commits: the caller owns the transaction.

A replay receipt (semantic.replays, keyed by cycle and memory) is inserted before any effect
and only the memories whose receipt was new get effects, so however often a cycle is resumed
its effects on a memory happen once.

Plan shapes are kept safe for a tenant the planner has no statistics for yet (it then expects
one row per tenant and user): rows are found by id lists passed as constants (one scan, at
worst over the user's rows) and per-row lookups go by primary key without tenant or user
predicates (row-level security still scopes them to the tenant), so a misestimate can never
turn into a scan of the user's rows per row.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Uuid, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from app.layers.scopes import not_knowledge

_IDS = ARRAY(Uuid)


def _json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), default=str, ensure_ascii=False)


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


# -- receipts and candidates ---------------------------------------------------------------


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
        ).bindparams(bindparam("ids", type_=_IDS)),
        {"ids": list(cycle_ids)},
    )
    return {r[0] for r in rows}


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
).bindparams(bindparam("turns", type_=_IDS))


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
).bindparams(bindparam("recent", type_=_IDS))


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


# -- replay --------------------------------------------------------------------------------

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
).bindparams(bindparam("ids", type_=_IDS))


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
            "rows": _json([{"memory_id": m, "priority": p} for m, p in replays]),
            "ids": [m for m, _ in replays],
            "tenant": tenant_id,
            "user": user_id,
            "cycle": cycle_id,
            "at": at,
            "gain": gain,
        },
    )
    return sorted((r[0] for r in rows), key=str)


# -- what the replayed memories share ------------------------------------------------------


@dataclass(frozen=True)
class ReplayedRow:
    memory_id: uuid.UUID
    kind: str
    content: str
    member: bool  # already a member of one of the user's consolidated memories


_REPLAYED_INFO = text(
    """
WITH members AS (
    SELECT DISTINCT unnest(c.member_ids) AS id FROM semantic.memories AS c
    WHERE c.tenant_id = :tenant AND c.user_id = :user AND c.kind = 'consolidated'
      AND c.member_ids && :ids
)
SELECT m.id, m.kind, m.content, (m.id IN (SELECT id FROM members)) AS member
FROM semantic.memories AS m
WHERE m.id = ANY(:ids) AND m.tenant_id = :tenant AND m.user_id = :user
ORDER BY m.id
"""
).bindparams(bindparam("ids", type_=_IDS))


def replayed_info(
    *, session: Session, tenant_id: str, user_id: str, memory_ids: Sequence[uuid.UUID]
) -> list[ReplayedRow]:
    if not memory_ids:
        return []
    rows = session.execute(
        _REPLAYED_INFO, {"tenant": tenant_id, "user": user_id, "ids": list(memory_ids)}
    )
    return [ReplayedRow(i, kind, content, bool(member)) for i, kind, content, member in rows]


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
).bindparams(bindparam("ids", type_=_IDS))


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
).bindparams(bindparam("ids", type_=_IDS))


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


# -- associations --------------------------------------------------------------------------

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
).bindparams(bindparam("ids", type_=_IDS))


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
            "rows": _json(
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


# -- consolidated memories -----------------------------------------------------------------

# A cluster becomes one memory: embedding = normalised mean of the members', importance,
# emotional intensity, salience and consolidation strength = the members' highest, time =
# the latest member's, sources, tags and topics = the union. Its content hash comes from its
# members alone, so the same cluster cannot be merged twice; members are kept as they are.
_CONSOLIDATE = text(
    """
WITH r AS (
    SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, content_hash text,
        content text, summary text, member_ids uuid[])
),
mem AS MATERIALIZED (
    SELECT m.id, m.importance, m.emotional_intensity, m.salience, m.consolidation_strength,
           m.occurred_at, m.valid_from, m.embedding, m.channel, m.source_turn_ids, m.tags,
           m.topics, m.agent_id
    FROM semantic.memories AS m
    WHERE m.id = ANY(:members) AND m.tenant_id = :tenant AND m.user_id = :user
),
agg AS (
    SELECT r.id, r.content_hash, r.content, r.summary, r.member_ids, a.*, s.turns, g.tags,
           t.topics
    FROM r
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, max(m.importance) AS importance,
               max(m.emotional_intensity) AS emotional_intensity, max(m.salience) AS salience,
               max(m.consolidation_strength) AS strength, max(m.occurred_at) AS occurred_at,
               min(m.valid_from) AS valid_from, l2_normalize(avg(m.embedding)) AS embedding,
               CASE WHEN count(DISTINCT m.channel) = 1 THEN min(m.channel) END AS channel,
               min(m.agent_id) AS agent_id
        FROM mem AS m WHERE m.id = ANY(r.member_ids)
    ) AS a
    CROSS JOIN LATERAL (
        SELECT COALESCE(array_agg(DISTINCT x ORDER BY x), '{}') AS turns
        FROM mem AS m, unnest(m.source_turn_ids) AS x WHERE m.id = ANY(r.member_ids)
    ) AS s
    CROSS JOIN LATERAL (
        SELECT array_agg(DISTINCT x ORDER BY x) AS tags
        FROM (SELECT unnest(m.tags) AS x FROM mem AS m WHERE m.id = ANY(r.member_ids)
              UNION ALL SELECT 'consolidated') AS u
    ) AS g
    CROSS JOIN LATERAL (
        SELECT COALESCE(jsonb_agg(DISTINCT x), CAST('[]' AS jsonb)) AS topics
        FROM mem AS m, jsonb_array_elements(m.topics) AS x WHERE m.id = ANY(r.member_ids)
    ) AS t
)
INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, summary, topics, tags,
    importance, emotional_intensity, salience, consolidation_strength, occurred_at, valid_from,
    source_turn_ids, content_hash, extractor, metadata, embedding, channel, member_ids,
    agent_id)
SELECT agg.id, :tenant, :user, 'consolidated', agg.content, agg.summary, agg.topics, agg.tags,
       agg.importance, agg.emotional_intensity, agg.salience, agg.strength, agg.occurred_at,
       agg.valid_from, agg.turns, agg.content_hash, 'dream',
       jsonb_build_object('cycle_id', CAST(:cycle AS text), 'members', agg.n),
       agg.embedding, agg.channel, agg.member_ids, agg.agent_id
FROM agg
WHERE agg.n = cardinality(agg.member_ids)
ORDER BY agg.id
ON CONFLICT (tenant_id, user_id, content_hash) DO NOTHING
RETURNING id, member_ids, importance
"""
).bindparams(bindparam("members", type_=_IDS))

# Each member is linked to its consolidated memory, and the consolidated memory mentions the
# entities its members mention (so entity lookups and graph walks reach it).
_LINK_MEMBERS = text(
    """
WITH c AS (
    SELECT r.id, unnest(r.member_ids) AS member_id
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, member_ids uuid[])
)
INSERT INTO conceptual.associations AS e
    (tenant_id, user_id, memory_a, memory_b, weight, co_activations, origin, last_activated_at)
SELECT :tenant, :user, LEAST(c.id, c.member_id), GREATEST(c.id, c.member_id), :weight, 0,
       'member', :at
FROM c
ON CONFLICT (memory_a, memory_b, tenant_id) DO NOTHING
"""
)

_MENTION_MEMBERS = text(
    """
INSERT INTO conceptual.mentions (id, tenant_id, user_id, entity_id, memory_id, turn_id, surface)
SELECT gen_random_uuid(), :tenant, :user, x.entity_id, x.id, NULL, x.surface
FROM (
    SELECT DISTINCT ON (r.id, mn.entity_id) r.id, mn.entity_id, mn.surface
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, member_ids uuid[])
    JOIN conceptual.mentions AS mn
      ON mn.memory_id = ANY(r.member_ids) AND mn.tenant_id = :tenant AND mn.user_id = :user
    ORDER BY r.id, mn.entity_id, mn.surface
) AS x
ON CONFLICT (entity_id, memory_id, tenant_id) DO NOTHING
"""
)


@dataclass(frozen=True)
class ConsolidatedRow:
    memory_id: uuid.UUID
    member_ids: tuple[uuid.UUID, ...]
    importance: float


def insert_consolidated(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    cycle_id: uuid.UUID,
    clusters: Sequence[dict[str, Any]],
    member_weight: float,
    at: datetime,
) -> list[ConsolidatedRow]:
    """Merge each cluster ({id, content_hash, content, summary, member_ids}) into one new
    memory of kind 'consolidated', linked to its members ('member' edges). A cluster already
    merged (same members) is left alone. Returns the memories created."""
    if not clusters:
        return []
    params = {"tenant": tenant_id, "user": user_id}
    members = sorted({uuid.UUID(str(m)) for c in clusters for m in c["member_ids"]}, key=str)
    rows = session.execute(
        _CONSOLIDATE,
        {**params, "rows": _json(clusters), "cycle": str(cycle_id), "members": members},
    )
    created = [
        ConsolidatedRow(memory_id, tuple(sorted(members, key=str)), float(importance))
        for memory_id, members, importance in rows
    ]
    if created:
        document = _json([{"id": c.memory_id, "member_ids": list(c.member_ids)} for c in created])
        session.execute(
            _LINK_MEMBERS, {**params, "rows": document, "weight": member_weight, "at": at}
        )
        session.execute(_MENTION_MEMBERS, {**params, "rows": document})
    created.sort(key=lambda c: str(c.memory_id))
    return created


# -- graph analytics -----------------------------------------------------------------------

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
).bindparams(bindparam("ids", type_=_IDS))


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
            "rows": _json([{"id": i, "importance": min(1.0, max(0.0, t))} for i, t in targets]),
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
).bindparams(bindparam("ids", type_=_IDS))


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
            "rows": _json([{"a": a, "b": b} for a, b in pairs]),
            "ids": sorted({m for pair in pairs for m in pair}, key=str),
            "weight": weight,
            "at": at,
        },
    )
    return sorted(((a, b) for a, b in rows), key=lambda p: (str(p[0]), str(p[1])))


# -- who to dream for ----------------------------------------------------------------------

# Users of one tenant with never-replayed memories dated since `since` whose cycle of the
# window starting at `window_start` has not run: a skip scan over the (tenant, user, ...)
# memories index, one probe per user (and one into the replays index for their last
# cycle). Users who never dreamt come first, then those who dreamt longest ago. The
# tenant's knowledge is no user: it is never replayed, linked or merged.
_RECENT_USERS = text(
    f"""
WITH RECURSIVE u AS (
    (SELECT m.user_id FROM semantic.memories AS m WHERE m.tenant_id = :tenant
     ORDER BY m.user_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.user_id FROM semantic.memories AS m
            WHERE m.tenant_id = :tenant AND m.user_id > u.user_id
            ORDER BY m.user_id LIMIT 1)
    FROM u WHERE u.user_id IS NOT NULL
)
SELECT u.user_id FROM u
CROSS JOIN LATERAL (
    SELECT max(r.replayed_at) AS last FROM semantic.replays AS r
    WHERE r.tenant_id = :tenant AND r.user_id = u.user_id
) AS l
WHERE u.user_id IS NOT NULL AND {not_knowledge("u.user_id")}
  AND (l.last IS NULL OR l.last < :window_start)
  AND EXISTS (SELECT 1 FROM semantic.memories AS m
              WHERE m.tenant_id = :tenant AND m.user_id = u.user_id
                AND m.occurred_at >= :since AND m.replay_count = 0
                AND m.valid_to IS NULL AND m.archived_at IS NULL)
ORDER BY l.last NULLS FIRST, u.user_id
LIMIT :limit
"""  # noqa: S608 - a constant predicate
)


def recent_users(
    *, session: Session, tenant_id: str, since: datetime, window_start: datetime, limit: int
) -> list[str]:
    """Users of the tenant with never-replayed memories dated since `since` whose cycle of
    the window starting at `window_start` has not run yet (at most `limit`, least recently
    dreamt first)."""
    rows = session.execute(
        _RECENT_USERS,
        {"tenant": tenant_id, "since": since, "window_start": window_start, "limit": limit},
    )
    return [r[0] for r in rows]
