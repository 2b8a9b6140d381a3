"""The /v1 routes: thin adapters from HTTP to the services, which own transactions and SQL."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC
from typing import Annotated, Any

from fastapi import (
    APIRouter,
    BackgroundTasks,
    HTTPException,
    Path,
    Query,
    Request,
    Response,
    status,
)
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, TypeAdapter

from app.api import schemas
from app.api.auth import Tenant
from app.api.shares import MeteredTenant, charge_items, within_share
from app.db.session import unit_of_work
from app.declared import PROCEDURE_QUERY, Declared, visible_pattern
from app.extraction.factory import get_extractor
from app.layers.conceptual.graph import (
    find_entity,
    neighbourhood,
    render_fact,
    visible_mentions,
)
from app.layers.semantic import listing
from app.limits import JsonStep, SafeText, text_problem
from app.services import procedures
from app.services.context import ContextRequest, ContextResult, assemble_context
from app.services.decay import restore_memories
from app.services.extraction_status import extraction_status, flush, run_flushed
from app.services.forget import forget_user
from app.services.memories import RememberRequest, get_memory, memory_view, remember
from app.services.search import SearchRequest, search
from app.services.stats import tenant_stats
from app.streams.events import (
    IDENTIFIER,
    Identifier,
)

router = APIRouter(prefix="/v1", responses=schemas.ERROR_RESPONSES)

_SEARCH_RESULT = TypeAdapter(schemas.SearchResult)
_CONTEXT_RESULT = TypeAdapter(ContextResult)
UserId = Annotated[str, Query(pattern=IDENTIFIER)]
UserPath = Annotated[str, Path(pattern=IDENTIFIER)]
AgentId = Annotated[
    str | None,
    Query(pattern=IDENTIFIER, description="the asking agent: its private map besides the shared"),
]


def _state(request: Request) -> Any:
    return request.app.state.engram


def _check_window(body: SearchRequest) -> None:
    """`since` after `until` is a window no row can be in: a client mistake, said so."""
    if body.since is None or body.until is None:
        return
    since, until = (
        at.replace(tzinfo=UTC) if at.tzinfo is None else at for at in (body.since, body.until)
    )
    if since > until:
        raise HTTPException(
            422, {"message": "since must not be after until", "fields": ["since", "until"]}
        )


@router.post("/search", tags=["recall"], response_model=schemas.SearchResult)
def post_search(body: SearchRequest, tenant: Tenant, request: Request) -> Response:
    """Hybrid search: the source turns that answer the query, each with the memories made
    from it attached (`unit: memories` ranks memories instead).

    A search is a retrieval of what it returns: their access counts go up, their decay clock
    restarts and they strengthen their Hebbian associations. `record: false` looks without
    touching anything (the memory console's searches do). A tenant searching faster than
    its share (ENGRAM_TENANT_READS_PER_S) gets 429 with Retry-After."""
    _check_window(body)
    state = _state(request)
    within_share(state.reads_quota, tenant)
    result = search(
        tenant,
        body,
        settings=state.settings,
        embedder=state.embedder,
        client=state.redis,
        record=body.record,
    )
    # Serialised straight from the dataclass by its schema: the generic path first deep-copies
    # every hit and its attached memories into dicts (dataclasses.asdict).
    return Response(_SEARCH_RESULT.dump_json(result), media_type="application/json")


@router.post(
    "/context",
    tags=["recall"],
    response_model=schemas.ContextResponse,
)
def post_context(body: ContextRequest, tenant: Tenant, request: Request) -> Response:
    """The context block for the user's next answer, packed into the token budget (a read of
    the tenant's share, as a search is)."""
    state = _state(request)
    within_share(state.reads_quota, tenant)
    result = assemble_context(
        tenant, body, settings=state.settings, embedder=state.embedder, client=state.redis
    )
    # As /search: serialised from the dataclass, not deep-copied into dicts and validated.
    return Response(_CONTEXT_RESULT.dump_json(result), media_type="application/json")


@router.post(
    "/memories",
    status_code=status.HTTP_201_CREATED,
    tags=["memories"],
    response_model=schemas.Remembered,
)
def post_memories(body: RememberRequest, tenant: MeteredTenant, request: Request) -> dict[str, Any]:
    """Explicit memories (e.g. a knowledge base): embedded, deduplicated, linked into L4.
    Each memory is one call of the tenant's share (ENGRAM_TENANT_CALLS_PER_S)."""
    charge_items(request, tenant, len(body.memories))
    state = _state(request)
    stored = remember(tenant, body, settings=state.settings, embedder=state.embedder)
    return {"memories": [{"id": m.id, "status": m.status} for m in stored]}


@router.get("/memories", tags=["memories"], response_model=schemas.MemoryPage)
def list_memories(
    tenant: MeteredTenant,
    user_id: UserId,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(pattern=listing.CURSOR_PATTERN, description="a page's next_cursor")
    ] = None,
    include_superseded: bool = False,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """A user's memories, newest first; pass `next_cursor` back for the next page."""
    try:
        after = listing.decode_cursor(cursor) if cursor else None
    except ValueError:
        raise HTTPException(422, {"message": "bad cursor", "fields": ["cursor"]}) from None
    with unit_of_work(tenant, agent_id=agent_id) as session:
        rows = listing.page(
            session, user_id, limit=limit, after=after, include_superseded=include_superseded
        )
    items = [memory_view(r) for r in rows[:limit]]
    next_cursor = listing.encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return {"memories": items, "next_cursor": next_cursor}


@router.get(
    "/memories/{memory_id}",
    tags=["memories"],
    response_model=schemas.MemoryWithRecall,
    response_model_exclude_unset=True,  # `recall` only when asked for
    responses=schemas.NOT_FOUND,
)
def get_memory_route(
    memory_id: uuid.UUID,
    tenant: MeteredTenant,
    recall: Annotated[
        int | None, Query(ge=0, le=100, description="total recall: source turns ± N turns")
    ] = None,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    found = get_memory(tenant, memory_id, recall=recall, agent_id=agent_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"memory {memory_id} not found")
    return found


@router.post(
    "/memories/{memory_id}/restore",
    tags=["memories"],
    response_model=schemas.Restored,
    responses=schemas.NOT_FOUND,
)
def restore_memory(memory_id: uuid.UUID, tenant: MeteredTenant, request: Request) -> dict[str, Any]:
    """Bring a memory that decay archived back into search (decay restarts from now)."""
    if get_memory(tenant, memory_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"memory {memory_id} not found")
    restored = restore_memories(_state(request).settings, tenant, [memory_id])
    return {"id": memory_id, "restored": bool(restored)}


@router.get(
    "/entities/{name:path}/graph",
    tags=["graph"],
    response_model=schemas.EntityGraph,
    responses=schemas.NOT_FOUND,
)
def entity_graph(
    name: Annotated[
        str,
        Path(max_length=256, description="the entity's name, as mentions spell it"),
        Declared(lambda: {"pattern": visible_pattern(invisible=False)}),
    ],
    tenant: MeteredTenant,
    user_id: UserId,
    depth: Annotated[int, Query(ge=1, le=4)] = 2,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """The entity's neighbourhood in the user's concept graph (depth-limited, strongest first)."""
    if not name.strip() or len(name) > 256 or text_problem(name):
        raise HTTPException(422, {"message": "bad entity name", "fields": ["name"]})
    with unit_of_work(tenant, agent_id=agent_id) as session:
        entity = find_entity(session=session, user_id=user_id, name=name)
        seen = (
            0
            if entity is None
            else visible_mentions(session=session, user_id=user_id, entity_id=entity.id)
        )
        if entity is None or not seen:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"entity {name!r} not found")
        edges = neighbourhood(
            session=session, user_id=user_id, entity_id=entity.id, depth=depth, limit=limit
        )
        found = {
            "id": entity.id,
            "name": entity.name,
            "kind": entity.kind,
            "mention_count": seen,
        }
    return {
        "entity": found,
        "edges": [{**dataclasses.asdict(e), "fact": render_fact(e)} for e in edges],
    }


class ProcedureIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    user_id: Identifier
    query: Annotated[SafeText, PROCEDURE_QUERY] = Field(min_length=1, max_length=4000)
    tool_sequence: list[JsonStep] = Field(min_length=1, max_length=100)
    success: StrictFloat = Field(ge=0, le=1)
    duration_ms: StrictFloat = Field(ge=0)


@router.post(
    "/procedures",
    status_code=status.HTTP_201_CREATED,
    tags=["procedures"],
    response_model=schemas.ProcedureView,
)
def post_procedure(body: ProcedureIn, tenant: MeteredTenant, request: Request) -> dict[str, Any]:
    """Count one run of a tool sequence for a query; confidence follows the outcomes."""
    state = _state(request)
    try:
        view = procedures.record(
            tenant_id=tenant,
            user_id=body.user_id,
            query=body.query,
            tool_sequence=body.tool_sequence,
            success=body.success,
            duration_ms=body.duration_ms,
            embedder=state.embedder,
            settings=state.settings,
        )
    except ValueError as exc:
        field = str(exc).split(" ", 1)[0].rstrip(":")
        raise HTTPException(422, {"message": str(exc), "fields": [field]}) from None
    return dataclasses.asdict(view)


@router.get("/procedures/suggest", tags=["procedures"], response_model=schemas.SuggestionResponse)
def suggest_procedure(
    tenant: MeteredTenant,
    request: Request,
    user_id: UserId,
    query: Annotated[
        str,
        Query(min_length=1, max_length=4000),
        PROCEDURE_QUERY,
    ],
    min_confidence: Annotated[float | None, Query(ge=0, le=1)] = None,
) -> dict[str, Any]:
    """The trusted tool sequence for a query like this one, or null."""
    state = _state(request)
    problem = text_problem(query)
    if problem:
        raise HTTPException(422, {"message": f"query {problem}", "fields": ["query"]})
    try:
        found = procedures.suggest(
            tenant_id=tenant,
            user_id=user_id,
            query=query,
            embedder=state.embedder,
            settings=state.settings,
            min_confidence=min_confidence,
        )
    except ValueError as exc:
        raise HTTPException(422, {"message": str(exc), "fields": ["query"]}) from None
    return {"suggestion": None if found is None else dataclasses.asdict(found)}


@router.delete("/users/{user_id}", tags=["users"], response_model=schemas.ForgetReport)
def delete_user(
    user_id: UserPath,
    tenant: MeteredTenant,
    request: Request,
) -> dict[str, Any]:
    """Forget a user: every layer and every Redis key of theirs; returns what was removed."""
    state = _state(request)
    report = forget_user(
        tenant_id=tenant, user_id=user_id, settings=state.settings, client=state.redis
    )
    return {"rows": report.rows, "redis_keys": report.redis_keys, "total": report.total}


@router.get("/users/{user_id}/extraction", tags=["users"], response_model=schemas.ExtractionStatus)
def extraction_state(user_id: UserPath, tenant: MeteredTenant, request: Request) -> dict[str, Any]:
    """How far extraction got with what was sent for this user: events still pending ingest
    (in the user's stream partition, other users' included), turns unscored and unclaimed,
    batches in flight or failed. `caught_up`: nothing is left at any of those stops;
    `waiting_for_idle`: only turns below the N-turn trigger are left (see the flush)."""
    state = _state(request)
    return extraction_status(state.settings, state.redis, tenant, user_id).as_dict()


@router.post(
    "/users/{user_id}/extraction/flush",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["users"],
    response_model=schemas.Flushed,
)
def flush_extraction(
    user_id: UserPath, tenant: MeteredTenant, request: Request, background: BackgroundTasks
) -> dict[str, Any]:
    """Extract the user's scored, unclaimed turns now, however few: at the end of a
    conversation, fewer than N would wait for the idle timeout. Claims one batch (none while
    the user has two in flight) and runs it after the answer; turns still being ingested or
    scored are not in it (the SDK's wait_until_extracted flushes once they are)."""
    state = _state(request)
    flushed, refs = flush(state.settings, tenant, user_id)
    if refs:
        extractor = get_extractor(state.settings)
        background.add_task(run_flushed, state.settings, extractor, state.embedder, refs)
    return dataclasses.asdict(flushed)


@router.get("/stats", tags=["operations"], response_model=schemas.Stats)
def stats(tenant: MeteredTenant) -> dict[str, Any]:
    """Rows per layer for this tenant, and its users."""
    return tenant_stats(tenant)
