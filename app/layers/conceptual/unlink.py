"""SQL that takes memories out of L4 (when they are deleted, or replaced by a new version).

A memory's mentions go, and the entities they counted lose that count; a relation the memory
alone stated (it is the relation's memory and no other statement counted it) goes, one that
others stated too loses one count. Entities left with no mention and no relation go too.
Associations of a deleted memory are dropped by the `memories_drop_edges` trigger; an edited
memory's are handed to its new version. Never commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Unlinked:
    mentions: int
    relations: int
    entities: int


_DROP_MENTIONS = text(
    """
WITH gone AS (
    DELETE FROM conceptual.mentions
    WHERE user_id = :user AND memory_id = ANY(CAST(:ids AS uuid[]))
    RETURNING entity_id
), counted AS (
    UPDATE conceptual.entities AS e SET mention_count = GREATEST(0, e.mention_count - g.n)
    FROM (SELECT entity_id, count(*) AS n FROM gone GROUP BY entity_id) AS g
    WHERE e.id = g.entity_id
    RETURNING e.id
)
SELECT (SELECT count(*) FROM gone), ARRAY(SELECT DISTINCT entity_id FROM gone)
"""
)
_DROP_SOLE_RELATIONS = text(
    "DELETE FROM conceptual.relations WHERE user_id = :user"
    " AND memory_id = ANY(CAST(:ids AS uuid[])) AND mention_count <= 1"
    " RETURNING source_entity_id, target_entity_id"
)
_UNCOUNT_RELATIONS = text(
    "UPDATE conceptual.relations SET mention_count = mention_count - 1, memory_id = NULL"
    " WHERE user_id = :user AND memory_id = ANY(CAST(:ids AS uuid[]))"
)
_DROP_ORPHANS = text(
    "DELETE FROM conceptual.entities AS e WHERE e.id = ANY(CAST(:entities AS uuid[]))"
    " AND e.mention_count <= 0"
    " AND NOT EXISTS (SELECT 1 FROM conceptual.mentions AS x WHERE x.entity_id = e.id)"
    " AND NOT EXISTS (SELECT 1 FROM conceptual.relations AS r"
    "  WHERE r.source_entity_id = e.id OR r.target_entity_id = e.id)"
)


def unlink_memories(*, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> Unlinked:
    """Remove these memories' mentions and the relations only they stated (see module)."""
    if not memory_ids:
        return Unlinked(0, 0, 0)
    params = {"user": user_id, "ids": list(memory_ids)}
    mentions, entities = session.execute(_DROP_MENTIONS, params).one()
    touched = set(entities or [])
    dropped = session.execute(_DROP_SOLE_RELATIONS, params).all()
    for source, target in dropped:
        touched.update((source, target))
    session.execute(_UNCOUNT_RELATIONS, params)
    orphans = session.execute(_DROP_ORPHANS, {"entities": list(touched)})
    return Unlinked(
        mentions=int(mentions),
        relations=len(dropped),
        entities=int(getattr(orphans, "rowcount", 0) or 0),
    )


_HAND_OVER = text(
    """
WITH old AS (
    DELETE FROM conceptual.associations
    WHERE user_id = :user AND (memory_a = :old OR memory_b = :old)
    RETURNING tenant_id, user_id, CASE WHEN memory_a = :old THEN memory_b ELSE memory_a END
              AS other, weight, co_activations, origin, last_activated_at, created_at
)
INSERT INTO conceptual.associations AS e (tenant_id, user_id, memory_a, memory_b, weight,
    co_activations, origin, last_activated_at, created_at)
SELECT tenant_id, user_id, LEAST(other, CAST(:new AS uuid)), GREATEST(other, CAST(:new AS uuid)),
       weight, co_activations, origin, last_activated_at, created_at
FROM old WHERE other <> CAST(:new AS uuid)
ON CONFLICT (memory_a, memory_b, tenant_id) DO UPDATE SET
    weight = GREATEST(e.weight, EXCLUDED.weight),
    co_activations = GREATEST(e.co_activations, EXCLUDED.co_activations),
    last_activated_at = GREATEST(e.last_activated_at, EXCLUDED.last_activated_at)
"""
)


def hand_over_associations(
    *, session: Session, user_id: str, old_id: uuid.UUID, new_id: uuid.UUID
) -> None:
    """The new version of a memory takes the old one's associations (learnt from retrieving
    the memory, not its wording); the superseded version keeps none."""
    session.execute(_HAND_OVER, {"user": user_id, "old": old_id, "new": new_id})
