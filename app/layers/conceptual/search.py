"""SQL for reaching memories through L4 entities: the second hop of a multi-hop question.

"What does my sister in Lisbon do?" finds "My sister Maya moved to Lisbon" by its words, but
the answer ("Maya started as a nurse") shares none of them: it shares the entity. The seeds
are the entities the question names and those of the memories the first hop ranked best;
the caller ranks the memories mentioning a seed (app/scoring/spreading.py). Hubs (the user,
the other speaker: an entity in more than `hub_share` of the user's memories) join
everything to everything, so they seed nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.db.nearest import vector_literal
from app.db.rows import fetch
from app.layers.semantic.search import MemoryFilter

_MAX_NAMES = 16
MAX_HUB_MENTIONS = 200  # bounds the rows one question can join whatever the user's size

# The filter's predicate is built from fixed fragments (MemoryFilter.clause); every value is
# a bound parameter. One row per (memory, seed entity it mentions), with the memory's cosine
# to the question: the seed memories come back too, which tells the caller their entities.
_LINKS = """
WITH seeds AS (
    SELECT e.id, e.canonical_name = ANY(CAST(:names AS text[])) AS named
    FROM conceptual.entities AS e
    WHERE e.tenant_id = :tenant AND e.user_id = :user
      AND (e.canonical_name = ANY(CAST(:names AS text[]))
           OR e.id IN (SELECT mn.entity_id FROM conceptual.mentions AS mn
                       WHERE mn.user_id = :user
                         AND mn.memory_id = ANY(CAST(:seed_memories AS uuid[]))))
      AND e.mention_count <= GREATEST(3, LEAST(:max_mentions, :hub_share * (
          SELECT count(*) FROM (SELECT 1 FROM semantic.memories AS c
              WHERE c.tenant_id = :tenant AND c.user_id = :user AND c.valid_to IS NULL
              LIMIT :count_cap) AS counted)))
    ORDER BY e.mention_count, e.id
    LIMIT :max_seeds
)
SELECT mn.memory_id, mn.entity_id, s.named,
       1 - (m.embedding <=> CAST(:vector AS vector)) AS cosine
FROM conceptual.mentions AS mn
JOIN seeds AS s ON s.id = mn.entity_id
JOIN semantic.memories AS m ON m.id = mn.memory_id
WHERE mn.user_id = :user AND {where} AND m.embedding IS NOT NULL
"""


@dataclass(frozen=True)
class Link:
    """A memory mentioning a seed entity; `named` when the question names the entity."""

    memory_id: uuid.UUID
    entity_id: uuid.UUID
    named: bool
    cosine: float


def entity_links(
    session: Session,
    memory_filter: MemoryFilter,
    *,
    names: Sequence[str],
    seed_memories: Sequence[uuid.UUID],
    vector: Sequence[float],
    hub_share: float,
    max_seeds: int = 32,
) -> list[Link]:
    """The memories passing the filter that mention a non-hub entity named in `names`
    (canonical forms) or mentioned by one of `seed_memories` (those included)."""
    if not names and not seed_memories:
        return []
    where, params = memory_filter.clause("m.")
    rows = fetch(
        session,
        _LINKS.format(where=where),
        {
            **params,
            "names": list(dict.fromkeys(names))[:_MAX_NAMES],
            "seed_memories": list(seed_memories),
            "max_mentions": MAX_HUB_MENTIONS,
            # Past max_mentions / hub_share memories the cap decides: no need to count on.
            "count_cap": int(MAX_HUB_MENTIONS / hub_share) + 1,
            "hub_share": hub_share,
            "max_seeds": max_seeds,
            "vector": vector_literal(vector),
        },
    )
    return [Link(r.memory_id, r.entity_id, bool(r.named), float(r.cosine)) for r in rows]
