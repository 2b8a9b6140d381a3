"""SQL for L4 entities, mentions and relations. Set-based upserts; never commits."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

_UPSERT_ENTITIES = text(
    "INSERT INTO conceptual.entities (id, tenant_id, user_id, name, canonical_name, kind,"
    " mention_count, first_seen_at, last_seen_at)"
    " SELECT gen_random_uuid(), r.tenant_id, r.user_id, r.name, r.canonical_name, r.kind,"
    " r.mentions, r.seen_at, r.seen_at"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(tenant_id text,"
    " user_id text, name text, canonical_name text, kind text, mentions int,"
    " seen_at timestamptz)"
    " ON CONFLICT (tenant_id, user_id, canonical_name) DO UPDATE SET"
    " mention_count = conceptual.entities.mention_count + excluded.mention_count,"
    " last_seen_at = GREATEST(conceptual.entities.last_seen_at, excluded.last_seen_at),"
    " first_seen_at = LEAST(conceptual.entities.first_seen_at, excluded.first_seen_at),"
    " kind = CASE WHEN conceptual.entities.kind = 'thing' THEN excluded.kind"
    "  ELSE conceptual.entities.kind END"
    " RETURNING user_id, canonical_name, id"
)


def upsert_entities(
    *, session: Session, rows: Sequence[dict[str, Any]]
) -> dict[tuple[str, str], Any]:
    """Create or count entities (one per canonical name and user); returns (user, canonical)
    → id."""
    if not rows:
        return {}
    result = session.execute(_UPSERT_ENTITIES, {"rows": json.dumps(list(rows), default=str)})
    return {(user, name): entity_id for user, name, entity_id in result}


_INSERT_MENTIONS = text(
    "INSERT INTO conceptual.mentions (id, tenant_id, user_id, entity_id, memory_id, turn_id,"
    " surface) SELECT gen_random_uuid(), r.tenant_id, r.user_id, r.entity_id, r.memory_id,"
    " r.turn_id, r.surface"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(tenant_id text, user_id text,"
    " entity_id uuid, memory_id uuid, turn_id uuid, surface text)"
    " ON CONFLICT (entity_id, memory_id, tenant_id) DO NOTHING"
)


def insert_mentions(*, session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(_INSERT_MENTIONS, {"rows": json.dumps(list(rows), default=str)})


_UPSERT_RELATIONS = text(
    "INSERT INTO conceptual.relations (id, tenant_id, user_id, source_entity_id,"
    " target_entity_id, relation_type, memory_id, turn_id)"
    " SELECT gen_random_uuid(), r.tenant_id, r.user_id, r.source_id, r.target_id,"
    " r.relation, r.memory_id, r.turn_id"
    " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(tenant_id text,"
    " user_id text, source_id uuid, target_id uuid, relation text, memory_id uuid, turn_id uuid)"
    " ON CONFLICT (tenant_id, source_entity_id, target_entity_id, relation_type) DO UPDATE SET"
    " mention_count = conceptual.relations.mention_count + 1,"
    " weight = LEAST(1.0, conceptual.relations.weight + 0.1)"
)


def upsert_relations(*, session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(_UPSERT_RELATIONS, {"rows": json.dumps(list(rows), default=str)})


def known_terms(
    *, session: Session, tenant_id: str, user_ids: Sequence[str], per_user: int = 200
) -> dict[str, list[str]]:
    """Each user's most mentioned entities plus the topics of their goals and preferences:
    what a new turn is 'connected' to."""
    rows = session.execute(
        text(
            "SELECT user_id, term FROM ("
            " SELECT user_id, canonical_name AS term, row_number() OVER"
            "  (PARTITION BY user_id ORDER BY mention_count DESC) AS rank"
            " FROM conceptual.entities WHERE tenant_id = :tenant AND user_id = ANY(:users)"
            ") AS ranked WHERE rank <= :per_user"
            " UNION"
            " SELECT m.user_id, jsonb_array_elements_text(m.topics) FROM semantic.memories AS m"
            " WHERE m.tenant_id = :tenant AND m.user_id = ANY(:users)"
            " AND m.kind IN ('goal', 'preference') AND m.valid_to IS NULL"
        ),
        {"tenant": tenant_id, "users": list(user_ids), "per_user": per_user},
    )
    terms: dict[str, list[str]] = {}
    for user_id, term in rows:
        terms.setdefault(user_id, []).append(term)
    return terms
