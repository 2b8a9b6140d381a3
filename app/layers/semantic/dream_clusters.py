"""Merged clusters: a tight cluster of replayed memories becomes one 'consolidated' memory
that lists and links its members (kept). Its content hash comes from its members alone, so a
cluster is merged once however often its cycle is re-run."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from app.layers.semantic.dream_params import IDS, as_json


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
).bindparams(bindparam("ids", type_=IDS))


def replayed_info(
    *, session: Session, tenant_id: str, user_id: str, memory_ids: Sequence[uuid.UUID]
) -> list[ReplayedRow]:
    if not memory_ids:
        return []
    rows = session.execute(
        _REPLAYED_INFO, {"tenant": tenant_id, "user": user_id, "ids": list(memory_ids)}
    )
    return [ReplayedRow(i, kind, content, bool(member)) for i, kind, content, member in rows]


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
).bindparams(bindparam("members", type_=IDS))

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
        {**params, "rows": as_json(clusters), "cycle": str(cycle_id), "members": members},
    )
    created = [
        ConsolidatedRow(memory_id, tuple(sorted(members, key=str)), float(importance))
        for memory_id, members, importance in rows
    ]
    if created:
        document = as_json([{"id": c.memory_id, "member_ids": list(c.member_ids)} for c in created])
        session.execute(
            _LINK_MEMBERS, {**params, "rows": document, "weight": member_weight, "at": at}
        )
        session.execute(_MENTION_MEMBERS, {**params, "rows": document})
    created.sort(key=lambda c: str(c.memory_id))
    return created
