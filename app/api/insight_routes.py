"""The /v1 routes the memory console reads beyond recall: the tenant's users, a memory's
importance over time and the entities it mentions, and the tenant's recent job runs. Thin
adapters to app/services/insight.py, which owns the transactions."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from pydantic import BaseModel, Field

from app.api import schemas
from app.api.shares import MeteredTenant
from app.services import insight
from app.services.insight import EntityRef, ImportanceCurve, UserSummary
from app.streams.events import IDENTIFIER

router = APIRouter(prefix="/v1", responses=schemas.ERROR_RESPONSES)


class UsersPage(BaseModel):
    users: list[UserSummary]
    next_cursor: str | None = Field(description="pass back as `cursor` for the next page")


class MemoryEntities(BaseModel):
    memory_id: uuid.UUID
    entities: list[EntityRef] = Field(description="most mentioned first")


class JobRuns(BaseModel):
    jobs: list[schemas.JobRunView]
    scope: str = Field(description="whose runs these are")


@router.get("/users", tags=["users"], response_model=UsersPage)
def list_users(
    tenant: MeteredTenant,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(pattern=IDENTIFIER)] = None,
) -> dict[str, Any]:
    """The tenant's users (anyone with turns or memories) by id, with their current memories
    and turns counted; pass `next_cursor` back for the next page."""
    page = insight.list_users(tenant, limit=limit, after=cursor)
    return dataclasses.asdict(page)


@router.get(
    "/memories/{memory_id}/importance",
    tags=["memories"],
    response_model=ImportanceCurve,
    responses=schemas.NOT_FOUND,
)
def memory_importance(
    memory_id: uuid.UUID,
    tenant: MeteredTenant,
    request: Request,
    days: Annotated[
        float | None,
        Query(gt=0, le=insight.MAX_HORIZON_DAYS, description="projection past now, in days"),
    ] = None,
    points: Annotated[int, Query(ge=2, le=500)] = 60,
) -> ImportanceCurve:
    """Importance over time: the access points that restarted the memory's decay clock, and
    the decay job's formula projected from that clock (`curve`), with when it would be
    archived (`archive_at`). Default projection: until archiving, within 7..3650 days."""
    found = insight.importance_curve(
        request.app.state.engram.settings, tenant, memory_id, horizon_days=days, points=points
    )
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"memory {memory_id} not found")
    return found


@router.get(
    "/memories/{memory_id}/entities",
    tags=["graph"],
    response_model=MemoryEntities,
    responses=schemas.NOT_FOUND,
)
def memory_entities(memory_id: uuid.UUID, tenant: MeteredTenant) -> dict[str, Any]:
    """The entities the memory mentions: start points for /v1/entities/{name}/graph."""
    found = insight.memory_entities(tenant, memory_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"memory {memory_id} not found")
    return {"memory_id": memory_id, "entities": found}


@router.get("/jobs", tags=["operations"], response_model=JobRuns)
def recent_jobs(
    tenant: MeteredTenant, limit: Annotated[int, Query(ge=1, le=200)] = 20
) -> dict[str, Any]:
    """The tenant's latest job runs, newest first. Passes that span every tenant at once
    (decay, the hot-memories refresh) are not listed: their counts are every tenant's."""
    return {"jobs": insight.tenant_jobs(tenant, limit=limit), "scope": "tenant"}
