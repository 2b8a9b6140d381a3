"""/v1/knowledge: the tenant's facts that belong to no user (app/services/knowledge.py)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from pydantic import BaseModel

from app.api import schemas
from app.api.shares import MeteredTenant, charge_items
from app.layers.semantic import listing
from app.services.knowledge import (
    KnowledgeRequest,
    add_knowledge,
    delete_knowledge,
    list_knowledge,
)

router = APIRouter(prefix="/v1", responses=schemas.ERROR_RESPONSES, tags=["knowledge"])


class KnowledgeDeleted(BaseModel):
    id: uuid.UUID
    deleted: bool


@router.post("/knowledge", status_code=status.HTTP_201_CREATED, response_model=schemas.Remembered)
def post_knowledge(
    body: KnowledgeRequest, tenant: MeteredTenant, request: Request
) -> dict[str, Any]:
    """Facts of the tenant (docs, policies): searchable by every user with include_knowledge.
    Each fact is one call of the tenant's share (ENGRAM_TENANT_CALLS_PER_S)."""
    charge_items(request, tenant, len(body.memories))
    state = request.app.state.engram
    stored = add_knowledge(tenant, body, settings=state.settings, embedder=state.embedder)
    return {"memories": [{"id": m.id, "status": m.status} for m in stored]}


@router.get("/knowledge", response_model=schemas.MemoryPage)
def get_knowledge(
    tenant: MeteredTenant,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(pattern=listing.CURSOR_PATTERN, description="a page's next_cursor")
    ] = None,
) -> dict[str, Any]:
    """The tenant's knowledge, newest first; pass `next_cursor` back for the next page."""
    try:
        after = listing.decode_cursor(cursor) if cursor else None
    except ValueError:
        raise HTTPException(422, {"message": "bad cursor", "fields": ["cursor"]}) from None
    items, next_cursor = list_knowledge(tenant, limit=limit, after=after)
    return {"memories": items, "next_cursor": next_cursor}


@router.delete(
    "/knowledge/{memory_id}", response_model=KnowledgeDeleted, responses=schemas.NOT_FOUND
)
def remove_knowledge(memory_id: uuid.UUID, tenant: MeteredTenant) -> dict[str, Any]:
    """Delete one fact of the tenant; a user's memory id is not found here."""
    if not delete_knowledge(tenant, memory_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"knowledge {memory_id} not found")
    return {"id": memory_id, "deleted": True}
