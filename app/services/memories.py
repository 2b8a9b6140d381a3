"""Explicit memories (a knowledge base, facts an operator loads) and reading memories back.

Explicit memories take the gems' road into L3 — embedded, deduplicated against what the user
already has, contradictions superseded, entities into L4 — in one transaction per request.
Total recall returns the raw L2 turns a memory came from, with the turns around them.

A request is held to what the stored rows must stay readable with (app/limits.py):
`occurred_at` in 1970..2200 UTC, metadata plain JSON at most 32 levels deep within
ENGRAM_MAX_METADATA_BYTES, text without NUL or lone surrogates. Reads do not trust the rows
anyway: metadata too deep for a response is replaced by a marker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, field_validator

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder, Owner
from app.extraction.base import Gem, embedding_text
from app.layers.conceptual.service import record_entities
from app.layers.episodic import repository as episodic
from app.layers.episodic import search as turn_search
from app.layers.semantic import search as memory_search
from app.layers.semantic.models import MEMORY_KINDS
from app.layers.semantic.service import store_gems
from app.limits import (
    ContentText,
    Metadata,
    RequestTimestamp,
    SafeText,
    blank_problem,
    readable_json,
)
from app.services.ingest import user_lock_key
from app.streams.events import Channel, Identifier

# A label on a memory (tags, topics) as requests give it.
Tag = Annotated[SafeText, Field(min_length=1, max_length=64)]


class MemoryIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    content: ContentText = Field(min_length=1, max_length=20_000)
    kind: Literal[MEMORY_KINDS] = "fact"  # type: ignore[valid-type]
    importance: StrictFloat = Field(default=0.5, ge=0, le=1)
    occurred_at: RequestTimestamp | None = Field(
        default=None,
        description="when it happened or was learnt (default: now); "
        "1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z",
    )
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    topics: list[Tag] = Field(default_factory=list, max_length=32)
    channel: Channel | None = None
    subject: SafeText | None = Field(
        default=None,
        max_length=512,
        description="a later memory with this subject and another value supersedes this one",
    )
    value: SafeText | None = Field(default=None, max_length=2000)
    metadata: Metadata = Field(
        default_factory=dict, description="plain JSON, at most 32 levels deep"
    )

    @field_validator("subject")
    @classmethod
    def _blank_subject_is_none(cls, value: str | None) -> str | None:
        # A blank subject (" ", a zero-width space) names nothing; kept, every memory sent
        # with one would supersede the others as if they were about one subject.
        return None if value is None or blank_problem(value) else value


class RememberRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    user_id: Identifier
    memories: list[MemoryIn] = Field(min_length=1, max_length=500)
    agent_id: Identifier | None = Field(
        default=None, description="the agent whose private map they join (none: the user's)"
    )
    shared: StrictBool = Field(
        default=False, description="an agent's memories every agent of the user may read"
    )


@dataclass(frozen=True)
class Remembered:
    id: uuid.UUID
    status: Literal["created", "reinforced"]


def _gem(item: MemoryIn, now: datetime) -> Gem:
    content = " ".join(item.content.split())
    at = item.occurred_at or now  # already UTC and in range (RequestTimestamp)
    return Gem(
        kind=item.kind,
        content=content,
        summary=content if len(content) <= 160 else content[:157] + "...",
        topics=list(item.topics),
        importance=item.importance,
        source_turn_ids=[],
        occurred_at=at,
        original=item.content,
        subject=item.subject,
        value=item.value,
        metadata={**item.metadata, "explicit": True},
        tags=list(item.tags),
        channel=item.channel,
    )


def remember(
    tenant_id: str, request: RememberRequest, *, settings: Settings, embedder: Embedder
) -> list[Remembered]:
    """Store the memories (each result in request order: a new row, or the one it repeats)."""
    now = datetime.now(UTC)
    gems = [_gem(item, now) for item in request.memories]
    vectors = embedder.embed(
        [embedding_text(g) for g in gems], [Owner(tenant_id, request.user_id)] * len(gems)
    )
    batch_id = uuid.uuid4()
    with unit_of_work(tenant_id, agent_id=request.agent_id) as session:
        # Stores of one user run one at a time, as extraction's do (see extraction.store).
        episodic.lock_users(session=session, keys=[user_lock_key(tenant_id, request.user_id)])
        stored = store_gems(
            session=session,
            settings=settings,
            tenant_id=tenant_id,
            user_id=request.user_id,
            batch_id=batch_id,
            extractor="explicit",
            gems=gems,
            vectors=vectors,
            turn_scores={},
            session_of_turn={},
            agent_id=request.agent_id,
            shared=request.shared and request.agent_id is not None,
        )
        record_entities(
            session=session, tenant_id=tenant_id, user_id=request.user_id, memories=stored.created
        )
    outcome: dict[int, Remembered] = {}
    for status, pairs in (("created", stored.created), ("reinforced", stored.reinforced)):
        for memory_id, gem in pairs:
            outcome[id(gem)] = Remembered(id=memory_id, status=status)  # type: ignore[arg-type]
    results: list[Remembered] = []
    for gem, vector in zip(gems, vectors, strict=True):
        found = outcome.get(id(gem))
        if found is None:  # folded into an earlier item of the same request
            found = _twin_of(gem, vector, gems, vectors, outcome)
        results.append(found)
    return results


def _twin_of(
    gem: Gem,
    vector: list[float],
    gems: list[Gem],
    vectors: list[list[float]],
    outcome: dict[int, Remembered],
) -> Remembered:
    best = max(
        (
            (sum(a * b for a, b in zip(vector, other_vector, strict=True)), outcome[id(other)])
            for other, other_vector in zip(gems, vectors, strict=True)
            if id(other) in outcome
        ),
        key=lambda pair: pair[0],
    )
    return Remembered(id=best[1].id, status="reinforced")


def memory_view(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "user_id": row.user_id,
        "agent_id": getattr(row, "agent_id", None),
        "shared": bool(getattr(row, "shared", False)),
        "kind": row.kind,
        "content": row.content,
        "summary": row.summary,
        "original": row.original,
        "topics": list(row.topics or []),
        "tags": list(row.tags or []),
        "importance": row.importance,
        "emotional_intensity": row.emotional_intensity,
        "consolidation_strength": row.consolidation_strength,
        "access_count": row.access_count,
        "occurred_at": row.occurred_at,
        "valid_from": row.valid_from,
        "valid_to": row.valid_to,
        "superseded_by": row.superseded_by,
        "archived_at": row.archived_at,
        "session_id": row.session_id,
        "channel": row.channel,
        "source_turn_ids": list(row.source_external_ids or []),
        "metadata": readable_json(row.metadata or {}, "metadata"),
        "created_at": row.created_at,
    }


def turn_view(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "external_id": row.external_id,
        "session_id": row.session_id,
        "role": row.role,
        "speaker": row.speaker,
        "content": row.content,
        "channel": row.channel,
        "occurred_at": row.occurred_at,
        "is_source": bool(getattr(row, "is_source", False)),
    }


def get_memory(
    tenant_id: str,
    memory_id: uuid.UUID,
    *,
    recall: int | None = None,
    agent_id: str | None = None,
) -> dict[str, Any] | None:
    """The memory (any user of the tenant; an agent's private one only for that agent), and
    with `recall` its source turns ± that many surrounding turns of the same session, in
    order and uncompressed."""
    with unit_of_work(tenant_id, agent_id=agent_id) as session:
        row = memory_search.memories_by_id(session, None, [memory_id]).get(memory_id)
        if row is None:
            return None
        view = memory_view(row)
        if recall is not None:
            window = turn_search.turn_window(
                session, tenant_id, row.user_id, list(row.source_ids), recall
            )
            view["recall"] = [turn_view(t) for t in window]
    return view
