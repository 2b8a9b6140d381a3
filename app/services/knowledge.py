"""Tenant-wide knowledge: facts that belong to no user (product docs, policies).

Knowledge is stored as memories of KNOWLEDGE_USER, a user id the client-facing identifier
pattern cannot produce (it starts with `~`), so no user collides with it, forgetting a user
can never name it, and row-level security keeps it inside its tenant like every other row.
Being ordinary memories, it takes the same road in (embedded, deduplicated, linked into L4)
and is ranked by the same search when a request asks for it (`include_knowledge`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.base import Embedder
from app.layers.scopes import KNOWLEDGE_USER
from app.layers.semantic import listing
from app.services.memories import MemoryIn, Remembered, RememberRequest, memory_view, remember


class KnowledgeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    memories: list[MemoryIn] = Field(min_length=1, max_length=500)


def add_knowledge(
    tenant_id: str, request: KnowledgeRequest, *, settings: Settings, embedder: Embedder
) -> list[Remembered]:
    """Store facts of the tenant (each result in request order: new, or the one it repeats)."""
    as_memories = RememberRequest.model_construct(
        user_id=KNOWLEDGE_USER, memories=request.memories, agent_id=None, shared=False
    )
    return remember(tenant_id, as_memories, settings=settings, embedder=embedder)


def list_knowledge(
    tenant_id: str, *, limit: int, after: tuple[datetime, uuid.UUID] | None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the tenant's knowledge, newest first, and the cursor of the next page."""
    with unit_of_work(tenant_id) as session:
        rows = listing.page(
            session, KNOWLEDGE_USER, limit=limit, after=after, include_superseded=False
        )
    items = [{**memory_view(r), "scope": "knowledge"} for r in rows[:limit]]
    next_cursor = listing.encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return items, next_cursor


def delete_knowledge(tenant_id: str, memory_id: uuid.UUID) -> bool:
    """Delete one fact of the tenant (its mentions and edges go with it); never a user's row."""
    with unit_of_work(tenant_id, all_agents=True) as session:
        deleted = session.execute(
            text(
                "DELETE FROM semantic.memories"
                " WHERE id = :id AND tenant_id = :tenant AND user_id = :user"
            ),
            {"id": memory_id, "tenant": tenant_id, "user": KNOWLEDGE_USER},
        ).rowcount
    return bool(deleted)
