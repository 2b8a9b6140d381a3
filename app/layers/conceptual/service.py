"""Entities and relations of stored gems into L4, one set-based upsert per kind of row."""

from __future__ import annotations

import uuid
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
    entities: dict[str, dict[str, Any]] = {}
    mentions: list[tuple[str, uuid.UUID, str | None, str]] = []
    relations: list[tuple[str, str, str, uuid.UUID, str | None]] = []
    for memory_id, gem in memories:
        speaker = gem.metadata.get("speaker") if isinstance(gem.metadata, dict) else None
        found, facts = extract_entities(gem.content, speaker=str(speaker) if speaker else None)
        turn_id = gem.source_turn_ids[0] if gem.source_turn_ids else None
        seen_here: set[str] = set()
        for mention in found:
            _count(
                entities,
                mention.canonical,
                mention.name,
                mention.kind,
                gem.occurred_at,
                new=mention.canonical not in seen_here,
            )
            if mention.canonical not in seen_here:
                mentions.append((mention.canonical, memory_id, turn_id, mention.surface))
                seen_here.add(mention.canonical)
        for fact in facts:
            for name in (fact.source, fact.target):
                # A relation's end is named in this memory too ("Alice prefers hotels"):
                # a mention like any other, counted once per memory.
                fresh = name not in seen_here
                _count(entities, name, name, "thing", gem.occurred_at, new=fresh)
                if fresh:
                    mentions.append((name, memory_id, turn_id, name))
                    seen_here.add(name)
            relations.append((fact.source, fact.target, fact.relation, memory_id, turn_id))
    if not entities:
        return 0
    ids = repository.upsert_entities(
        session=session,
        rows=[
            {"tenant_id": tenant_id, "user_id": user_id, "canonical_name": key, **value}
            for key, value in sorted(entities.items())
        ],
    )
    repository.insert_mentions(
        session=session,
        rows=[
            {
                "tenant_id": tenant_id,
                "user_id": user_id,
                "entity_id": ids[canonical],
                "memory_id": memory_id,
                "turn_id": turn_id,
                "surface": surface,
            }
            for canonical, memory_id, turn_id, surface in mentions
        ],
    )
    repository.upsert_relations(
        session=session,
        rows=[
            {
                "tenant_id": tenant_id,
                "user_id": user_id,
                "source_id": ids[source],
                "target_id": ids[target],
                "relation": relation,
                "memory_id": memory_id,
                "turn_id": turn_id,
            }
            for source, target, relation, memory_id, turn_id in _unique(relations)
            if source != target
        ],
    )
    return len(entities)


def _count(
    entities: dict[str, dict[str, Any]],
    canonical: str,
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
    relations: list[tuple[str, str, str, uuid.UUID, str | None]],
) -> list[tuple[str, str, str, uuid.UUID, str | None]]:
    """One row per (source, target, relation): a statement may not upsert a row twice."""
    seen: dict[tuple[str, str, str], tuple[str, str, str, uuid.UUID, str | None]] = {}
    for row in relations:
        seen.setdefault(row[:3], row)
    return list(seen.values())
