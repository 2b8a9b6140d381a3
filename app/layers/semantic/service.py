"""Gems into L3: dedupe within the batch, reinforce near-duplicates, supersede contradictions.

All of one user's batch is decided with three set-based reads (nearest memories per gem,
current memories per subject) and written with three statements, in the caller's transaction.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.config import Settings
from app.extraction.base import Gem, embedding_text
from app.layers.semantic import repository


def content_hash(content: str) -> str:
    """Exact-duplicate key: case and whitespace do not make a new memory."""
    return hashlib.sha256(" ".join(content.lower().split()).encode()).hexdigest()


# A number: an optional sign (not a hyphen inside a word, as in "COVID-19"), digits, and
# digit groups joined by . , : / - (decimals, thousands, times, dates, ranges).
_NUMBER = re.compile(r"(?:(?<![\w.])[-\u2212])?\d+(?:[.,:/-]\d+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def numbers_in(text: str) -> list[str]:
    """The numbers a text states, normalised ("1,800" = "1800", "1,2,3" = "1, 2, 3"), sorted."""
    found: list[str] = []
    for match in _NUMBER.finditer(text):
        token = _THOUSANDS.sub("", match.group(0).replace("\u2212", "-"))
        found += token.split(",")
    return sorted(found)


def same_numbers(a: str, b: str) -> bool:
    """Whether two texts state the same numbers (amounts, counts, dates, versions).

    The embedding barely tells "a budget of 4,372 euros" from "a budget of 20,092 euros"
    (cosine ≥ 0.95 here), yet they are different memories: a near-duplicate must also agree
    on every number, or reinforcing would keep the first figure and lose the second. Numbers
    written as words ("twelve") are not compared."""
    return numbers_in(a) == numbers_in(b)


def _cosines(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    if not vectors:
        return np.zeros((0, 0), dtype=np.float32)
    matrix = np.asarray(vectors, dtype=np.float32)
    return matrix @ matrix.T


@dataclass
class StoredGems:
    created: list[tuple[uuid.UUID, Gem]] = field(default_factory=list)
    reinforced: list[tuple[uuid.UUID, Gem]] = field(default_factory=list)
    superseded: int = 0


@dataclass
class _Pending:
    gem: Gem
    vector: Sequence[float]
    sources: list[str]
    row: int  # its position in the batch's similarity matrix


def store_gems(
    *,
    session: Session,
    settings: Settings,
    tenant_id: str,
    user_id: str,
    batch_id: uuid.UUID,
    extractor: str,
    gems: Sequence[Gem],
    vectors: Sequence[Sequence[float]],
    turn_scores: dict[str, tuple[float, float]],
    session_of_turn: dict[str, Any],
    channel_of_turn: dict[str, str] | None = None,
) -> StoredGems:
    stored = StoredGems()
    # 1. Within the batch: a gem close to an earlier one only adds its sources to it.
    # All pairwise cosines in one product (vectors are unit length): the pure-Python pair loop
    # was 14 % of a store worker's time at ~30 gems per batch.
    similar = _cosines(vectors) >= settings.dedup_cosine
    pending: list[_Pending] = []
    for row, (gem, vector) in enumerate(zip(gems, vectors, strict=True)):
        twin = next(
            (
                p
                for p in pending
                if similar[p.row, row]
                and same_numbers(p.gem.content, gem.content)
                # One sentence said twice (by two speakers) gives one vector but two memories;
                # the very same content meets its twin by content hash below.
                and embedding_text(p.gem) != embedding_text(gem)
            ),
            None,
        )
        if twin is not None:
            twin.sources.extend(s for s in gem.source_turn_ids if s not in twin.sources)
            continue
        pending.append(_Pending(gem, vector, list(gem.source_turn_ids), row))

    # 2. Against stored memories: near-duplicates reinforce; same subject+value reinforces.
    nearest = repository.nearest_per_vector(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        vectors=[p.vector for p in pending],
        texts=[p.gem.content for p in pending],
    )
    subjects = sorted({p.gem.subject for p in pending if p.gem.subject})
    current = repository.current_by_subject(
        session=session, tenant_id=tenant_id, user_id=user_id, subjects=subjects
    )
    by_subject: dict[str, list[Any]] = {}
    for row in current:
        by_subject.setdefault(row.subject, []).append(row)

    reinforce_rows: list[dict[str, Any]] = []
    new_rows: list[dict[str, Any]] = []
    new_gems: list[Gem] = []
    supersede_rows: list[dict[str, Any]] = []
    for item, neighbours in zip(pending, nearest, strict=True):
        gem = item.gem
        same_value = [
            r for r in by_subject.get(gem.subject or "", []) if (r.value or "") == (gem.value or "")
        ]
        match = next(
            (
                memory_id
                for memory_id, cosine, trigram, subject, value, content in neighbours
                if cosine >= settings.dedup_cosine
                and trigram >= settings.dedup_trigram
                and same_numbers(content, gem.content)
                # Memories about two different subjects are never one memory, however alike.
                and (not gem.subject or not subject or (subject, value) == (gem.subject, gem.value))
            ),
            same_value[0].id if same_value else None,
        )
        if match is not None:
            reinforce_rows.append(
                {"id": match, "importance": gem.importance, "source_turn_ids": item.sources}
            )
            stored.reinforced.append((match, gem))
            continue
        digest = content_hash(gem.content)
        twin_row = next((r for r in new_rows if r["content_hash"] == digest), None)
        if twin_row is not None:  # same text twice in one batch (below the cosine cut-off)
            twin_row["source_turn_ids"] += [
                s for s in item.sources if s not in twin_row["source_turn_ids"]
            ]
            continue
        memory_id = uuid.uuid4()
        for old in by_subject.get(gem.subject or "", []):
            if (old.value or "") != (gem.value or "") and old.occurred_at <= gem.occurred_at:
                supersede_rows.append(
                    {"id": old.id, "new_id": memory_id, "valid_to": gem.occurred_at}
                )
        emotional, salience = max(
            (turn_scores.get(t, (0.0, 0.0)) for t in item.sources), default=(0.0, 0.0)
        )
        new_rows.append(
            {
                "id": memory_id,
                "tenant_id": tenant_id,
                "user_id": user_id,
                "kind": gem.kind,
                "content": gem.content,
                "summary": gem.summary,
                "topics": list(gem.topics),
                "tags": sorted({gem.kind, *gem.tags}),
                "importance": min(1.0, max(0.0, gem.importance)),
                "emotional_intensity": emotional,
                "salience": salience,
                "occurred_at": gem.occurred_at,
                "valid_from": gem.occurred_at,
                "session_id": session_of_turn.get(item.sources[0]) if item.sources else None,
                "source_turn_ids": item.sources,
                "content_hash": digest,
                "original": gem.original,
                "subject": gem.subject,
                "value": gem.value,
                "extractor": extractor,
                "extraction_batch_id": batch_id,
                "metadata": gem.metadata,
                "embedding": repository.vector_literal(item.vector),
                "channel": gem.channel
                or (channel_of_turn or {}).get(item.sources[0] if item.sources else "", None),
            }
        )
        new_gems.append(gem)

    repository.reinforce(session=session, rows=reinforce_rows)
    results = repository.insert_memories(session=session, rows=new_rows)
    for row, gem in zip(new_rows, new_gems, strict=True):
        memory_id, inserted = results[row["content_hash"]]
        (stored.created if inserted else stored.reinforced).append((memory_id, gem))
    # Only rows actually inserted may supersede (an exact twin reinforced an old row instead).
    created_ids = {memory_id for memory_id, _ in stored.created}
    supersede_rows = [r for r in supersede_rows if r["new_id"] in created_ids]
    repository.supersede(session=session, rows=supersede_rows)
    stored.superseded = len({r["id"] for r in supersede_rows})
    return stored
