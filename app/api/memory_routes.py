"""The /v1 routes that change one memory or one session: edit with history, delete, related
memories, clear a session. Thin adapters to app/services/memory_edits.py and
app/services/sessions_clear.py, which own the transactions.

`user_id` is optional on the memory routes, as on `GET /v1/memories/{id}`: a memory id is
unique in its tenant; when given, a memory of another user answers 404 like an unknown one.
`agent_id` (a query parameter; a body field of PATCH, as of search) is the agent acting: an
agent's private memory exists for that agent only, like on `GET /v1/memories/{id}`. Clearing
a session acts for the whole user: it reaches every agent's memories.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, status

from app.api import memory_schemas
from app.api.schemas import ERROR_RESPONSES
from app.api.shares import MeteredTenant
from app.services.memory_edits import (
    MemoryEdit,
    MemoryNotFoundError,
    VersionConflictError,
    delete_memory,
    memory_history,
    related,
    update_memory,
)
from app.services.sessions_clear import SessionNotFoundError, clear_session
from app.streams.events import IDENTIFIER

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)

OwnerId = Annotated[
    str | None,
    Query(pattern=IDENTIFIER, description="when given, the memory must be this user's"),
]
AgentId = Annotated[
    str | None,
    Query(pattern=IDENTIFIER, description="the acting agent: its private memories too"),
]


def _state(request: Request) -> Any:
    return request.app.state.engram


def _not_found(memory_id: uuid.UUID) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"memory {memory_id} not found")


@router.patch(
    "/memories/{memory_id}",
    tags=["memories"],
    response_model=memory_schemas.MemoryEdited,
    responses={**memory_schemas.NOT_FOUND, **memory_schemas.CONFLICT},
)
def patch_memory(
    memory_id: uuid.UUID, body: MemoryEdit, tenant: MeteredTenant, request: Request
) -> dict[str, Any]:
    """Edit a memory: the new content becomes a new version (re-embedded, re-indexed), the old
    one stays readable in its history and leaves search. Sending the same edit again changes
    nothing (`status: unchanged`); editing a replaced version is a 409 naming the current."""
    state = _state(request)
    try:
        edited = update_memory(
            tenant,
            memory_id,
            body,
            settings=state.settings,
            embedder=state.embedder,
            client=state.redis,
        )
    except MemoryNotFoundError:
        raise _not_found(memory_id) from None
    except VersionConflictError as exc:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            {
                "message": str(exc),
                "fields": [exc.field],
                "current_id": str(exc.current_id) if exc.current_id else None,
                "duplicate_of": str(exc.duplicate_of) if exc.duplicate_of else None,
            },
        ) from None
    return dataclasses.asdict(edited)


@router.delete(
    "/memories/{memory_id}",
    tags=["memories"],
    response_model=memory_schemas.MemoryDeleted,
    responses=memory_schemas.NOT_FOUND,
)
def delete_memory_route(
    memory_id: uuid.UUID,
    tenant: MeteredTenant,
    request: Request,
    user_id: OwnerId = None,
    with_trace: Annotated[
        bool, Query(description="also delete the source turns no other memory cites")
    ] = False,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """Delete a memory and all its versions from every layer (mentions, relations only it
    stated, associations, recorded hits, Redis copies); its raw turns stay unless
    `with_trace`."""
    state = _state(request)
    try:
        deleted = delete_memory(
            tenant,
            memory_id,
            user_id=user_id,
            with_trace=with_trace,
            settings=state.settings,
            client=state.redis,
            agent_id=agent_id,
        )
    except MemoryNotFoundError:
        raise _not_found(memory_id) from None
    return dataclasses.asdict(deleted)


@router.get(
    "/memories/{memory_id}/history",
    tags=["memories"],
    response_model=memory_schemas.MemoryHistory,
    responses=memory_schemas.NOT_FOUND,
)
def get_history(
    memory_id: uuid.UUID, tenant: MeteredTenant, user_id: OwnerId = None, agent_id: AgentId = None
) -> dict[str, Any]:
    """Every version of the memory, oldest first, from any version's id."""
    found = memory_history(tenant, memory_id, user_id=user_id, agent_id=agent_id)
    if found is None:
        raise _not_found(memory_id)
    return found


@router.get(
    "/memories/{memory_id}/related",
    tags=["memories"],
    response_model=memory_schemas.RelatedMemories,
    responses=memory_schemas.NOT_FOUND,
)
def get_related(
    memory_id: uuid.UUID,
    tenant: MeteredTenant,
    user_id: OwnerId = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """Current memories associated with this one (Hebbian edges) or sharing its entities,
    strongest first."""
    found = related(tenant, memory_id, user_id=user_id, limit=limit, agent_id=agent_id)
    if found is None:
        raise _not_found(memory_id)
    return {"memory_id": memory_id, "related": found}


@router.delete(
    "/users/{user_id}/sessions/{session_id}",
    tags=["users"],
    response_model=memory_schemas.SessionCleared,
    responses=memory_schemas.NOT_FOUND,
)
def delete_session(
    user_id: Annotated[str, Path(pattern=IDENTIFIER)],
    session_id: uuid.UUID,
    tenant: MeteredTenant,
    request: Request,
) -> dict[str, Any]:
    """Clear a session: its turns, the memories no other session supports (the others keep
    only their other citations), its turns in working memory — every agent's memories among
    them. Session ids come with search hits, memories and recalled turns (`session_id`)."""
    state = _state(request)
    try:
        cleared = clear_session(
            tenant, user_id, session_id, settings=state.settings, client=state.redis
        )
    except SessionNotFoundError:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"session {session_id} of user {user_id} not found"
        ) from None
    return dataclasses.asdict(cleared)
