"""Entities and relations of stored gems into L4, one set-based upsert per kind of row."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.extraction.base import Gem
from app.extraction.entities import extract_entities
from app.layers.conceptual import repository


def record_entities(
    *,
    session: Session,
    tenant_id: str,
    user_id: str,
    memories: Sequence[tuple[uuid.UUID, Gem]],
) -> int:
    """Count each entity once per memory mention; link mentions to memory and source turn.

    Returns the number of distinct entities touched."""
    return record_entities_of(session=session, tenant_id=tenant_id, groups=[(user_id, memories)])


def record_entities_of(
    *,
    session: Session,
    tenant_id: str,
    groups: Sequence[tuple[str, Sequence[tuple[uuid.UUID, Gem]]]],
) -> int:
    """`record_entities` for many (user, memories) groups, one statement per kind of row for
    groups of distinct users. A user's second group goes to a next round of statements, so
    its upsert counts on top of the first's exactly as two calls would (one statement may not
    upsert a row twice). Returns the number of (user, entity) pairs touched, over rounds."""
    rounds: list[list[tuple[str, Sequence[tuple[uuid.UUID, Gem]]]]] = []
    seen: Counter[str] = Counter()
    for user_id, memories in groups:
        if not memories:
            continue
        at = seen[user_id]
        seen[user_id] += 1
        if at == len(rounds):
            rounds.append([])
        rounds[at].append((user_id, memories))
    return sum(_record_round(session, tenant_id, part) for part in rounds)


def _record_round(
    session: Session,
    tenant_id: str,
    groups: Sequence[tuple[str, Sequence[tuple[uuid.UUID, Gem]]]],
) -> int:
    entities: dict[tuple[str, str], dict[str, Any]] = {}
    mentions: list[tuple[str, str, uuid.UUID, str | None, str]] = []
    relations: list[tuple[str, str, str, str, uuid.UUID, str | None]] = []
    for user_id, memories in groups:
        _collect(user_id, memories, entities, mentions, relations)
    if not entities:
        return 0
    ids = repository.upsert_entities(
        session=session,
        rows=[
            {"tenant_id": tenant_id, "user_id": user, "canonical_name": key, **value}
            for (user, key), value in sorted(entities.items())
        ],
    )
    repository.insert_mentions(
        session=session,
        rows=[
            {
                "tenant_id": tenant_id,
                "user_id": user,
                "entity_id": ids[(user, canonical)],
                "memory_id": memory_id,
                "turn_id": turn_id,
                "surface": surface,
            }
            for user, canonical, memory_id, turn_id, surface in mentions
        ],
    )
    repository.upsert_relations(
        session=session,
        rows=[
            {
                "tenant_id": tenant_id,
                "user_id": user,
                "source_id": ids[(user, source)],
                "target_id": ids[(user, target)],
                "relation": relation,
                "memory_id": memory_id,
                "turn_id": turn_id,
            }
            for user, source, target, relation, memory_id, turn_id in _unique(relations)
            if source != target
        ],
    )
    return len(entities)


def _collect(
    user_id: str,
    memories: Sequence[tuple[uuid.UUID, Gem]],
    entities: dict[tuple[str, str], dict[str, Any]],
    mentions: list[tuple[str, str, uuid.UUID, str | None, str]],
    relations: list[tuple[str, str, str, str, uuid.UUID, str | None]],
) -> None:
    """One user's entities, mentions and relations of these memories, added to the round's."""
    for memory_id, gem in memories:
        speaker = gem.metadata.get("speaker") if isinstance(gem.metadata, dict) else None
        found, facts = extract_entities(gem.content, speaker=str(speaker) if speaker else None)
        turn_id = gem.source_turn_ids[0] if gem.source_turn_ids else None
        seen_here: set[str] = set()
        for mention in found:
            _count(
                entities,
                (user_id, mention.canonical),
                mention.name,
                mention.kind,
                gem.occurred_at,
                new=mention.canonical not in seen_here,
            )
            if mention.canonical not in seen_here:
                mentions.append((user_id, mention.canonical, memory_id, turn_id, mention.surface))
                seen_here.add(mention.canonical)
        for fact in facts:
            for name in (fact.source, fact.target):
                # A relation's end is named in this memory too ("Alice prefers hotels"):
                # a mention like any other, counted once per memory.
                fresh = name not in seen_here
                _count(entities, (user_id, name), name, "thing", gem.occurred_at, new=fresh)
                if fresh:
                    mentions.append((user_id, name, memory_id, turn_id, name))
                    seen_here.add(name)
            relations.append((user_id, fact.source, fact.target, fact.relation, memory_id, turn_id))


def _count(
    entities: dict[tuple[str, str], dict[str, Any]],
    canonical: tuple[str, str],
    name: str,
    kind: str,
    at: datetime,
    *,
    new: bool,
) -> None:
    entry = entities.setdefault(
        canonical, {"name": name, "kind": kind, "mentions": 0, "seen_at": at}
    )
    entry["mentions"] += 1 if new else 0
    entry["seen_at"] = max(entry["seen_at"], at)
    if entry["kind"] == "thing" and kind != "thing":
        entry["kind"] = kind


def _unique(
    relations: list[tuple[str, str, str, str, uuid.UUID, str | None]],
) -> list[tuple[str, str, str, str, uuid.UUID, str | None]]:
    """One row per (user, source, target, relation): a statement may not upsert a row twice."""
    seen: dict[tuple[str, ...], tuple[str, str, str, str, uuid.UUID, str | None]] = {}
    for row in relations:
        seen.setdefault(row[:4], row)
    return list(seen.values())
