"""What the REST API answers, as typed models: the OpenAPI schema (and /docs) shows every field
a client can rely on, and FastAPI checks each answer against it.

Search results, procedures and the extraction flush reuse the services' own dataclasses, so a
field added there reaches the API and its schema at once. The other bodies are assembled from
rows and dicts; their models allow extra keys, so a key a service adds later still reaches
clients instead of being dropped by the model (add it here to give it a type).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.services.extraction_status import Flushed
from app.services.procedures import ProcedureView, Suggestion
from app.services.search_models import AttachedMemory, SearchHit, SearchResult

__all__ = [
    "AttachedMemory",
    "ContextResponse",
    "EntityGraph",
    "ErrorBody",
    "EventsAccepted",
    "ExtractionStatus",
    "Flushed",
    "ForgetReport",
    "Health",
    "MemoryPage",
    "MemoryWithRecall",
    "ProcedureView",
    "Remembered",
    "Restored",
    "SearchHit",
    "SearchResult",
    "Stats",
    "SuggestionResponse",
    "ValidationErrorBody",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---------------------------------------------------------------------------------------------
# Errors


class ValidationErrorItem(_Open):
    """One problem as the validator reported it (`loc` is where, `msg` what)."""

    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorDetail(BaseModel):
    message: str = Field(description="every problem in one line, field by field")
    fields: list[str] = Field(
        description="the offending fields, as paths into the request (`events[3].external_id`)"
    )
    errors: list[ValidationErrorItem] = Field(
        default_factory=list, description="the validator's own report, when it found them"
    )


class ValidationErrorBody(BaseModel):
    """422: the request names a field wrongly, or a value is out of range."""

    detail: ValidationErrorDetail


class ErrorDetail(_Open):
    message: str
    unavailable: list[str] | None = Field(
        default=None, description="503: the dependencies that are down (`database`, `redis`)"
    )


class ErrorBody(BaseModel):
    """Any other error: 401, 404, 413, 415, 429 and 503 (those two with `Retry-After`)."""

    detail: ErrorDetail | str


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "no key, or a key that is unknown or revoked"},
    413: {"model": ErrorBody, "description": "the body is over ENGRAM_API_MAX_BODY_BYTES"},
    415: {"model": ErrorBody, "description": "a compressed body (Content-Encoding): send it plain"},
    422: {"model": ValidationErrorBody, "description": "invalid request, fields named"},
    429: {"model": ErrorBody, "description": "over the tenant's share; retry after Retry-After"},
    503: {"model": ErrorBody, "description": "a dependency is down; retry after Retry-After"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody}}


# ---------------------------------------------------------------------------------------------
# Capture


class EventsAccepted(BaseModel):
    accepted: int
    ids: list[str] = Field(description="event ids, in the order sent (idempotent per event)")


# ---------------------------------------------------------------------------------------------
# Context


class ContextTurn(_Open):
    """A live-conversation turn from working memory (L1)."""

    id: str
    role: str
    speaker: str | None = None
    content: str
    at: datetime
    suspected_instruction: bool = False


class ContextItem(_Open):
    """A ranked turn (`layer: turn`) or memory packed into the block."""

    id: uuid.UUID
    layer: Literal["memory", "turn"]
    kind: str
    content: str
    occurred_at: datetime
    score: float
    source_turn_ids: list[str] = Field(default_factory=list)
    event_ids: list[str] = Field(default_factory=list)
    session_id: uuid.UUID | None = None
    speaker: str | None = None
    role: str | None = None
    suspected_instruction: bool = False


class ContextFact(_Open):
    line: str
    memory_id: str | None = None
    suspected_instruction: bool = False


class ContextProcedure(_Open):
    id: uuid.UUID
    tool_sequence: list[Any]
    confidence: float
    similarity: float
    suspected_instruction: bool = False


class ContextParts(_Open):
    turns: list[ContextTurn] = Field(default_factory=list)
    summary: str | None = None
    memories: list[ContextItem] = Field(default_factory=list)
    facts: list[ContextFact] = Field(default_factory=list)
    procedure: ContextProcedure | None = None


class ContextResponse(BaseModel):
    text: str = Field(description="the block to put in front of the model")
    tokens: int
    token_budget: int
    prefetch: Literal["hit", "miss"]
    parts: ContextParts
    took_ms: float
    warnings: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Memories


class RememberedItem(BaseModel):
    id: uuid.UUID
    status: Literal["created", "reinforced"]


class Remembered(BaseModel):
    memories: list[RememberedItem]


class Memory(_Open):
    id: uuid.UUID
    user_id: str
    agent_id: str | None = Field(default=None, description="the agent whose map holds it")
    shared: bool = False
    kind: str
    content: str
    summary: str | None = None
    original: str | None = None
    topics: list[Any] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    importance: float
    emotional_intensity: float | None = None
    consolidation_strength: float | None = None
    access_count: int | None = None
    occurred_at: datetime
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: uuid.UUID | None = None
    archived_at: datetime | None = None
    session_id: uuid.UUID | None = None
    channel: str | None = None
    source_turn_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None


class RecallTurn(_Open):
    """A raw L2 turn around the memory's sources (`is_source`: one of them)."""

    id: uuid.UUID
    external_id: str | None = None
    session_id: uuid.UUID | None = None
    role: str
    speaker: str | None = None
    content: str
    channel: str | None = None
    occurred_at: datetime
    is_source: bool = False


class MemoryWithRecall(Memory):
    recall: list[RecallTurn] | None = Field(
        default=None, description="with ?recall=N: the source turns ± N, in order"
    )


class MemoryPage(BaseModel):
    memories: list[Memory]
    next_cursor: str | None = Field(description="pass back as `cursor` for the next page")


class Restored(BaseModel):
    id: uuid.UUID
    restored: bool


# ---------------------------------------------------------------------------------------------
# Graph


class Entity(_Open):
    id: uuid.UUID
    name: str
    kind: str
    mention_count: int


class GraphEdge(_Open):
    """A relation reached from the entity; `weight` is the path's, `depth` its hops."""

    source: str
    relation: str
    target: str
    weight: float
    depth: int
    source_id: uuid.UUID
    target_id: uuid.UUID
    memory_id: uuid.UUID | None = None
    fact: str


class EntityGraph(BaseModel):
    entity: Entity
    edges: list[GraphEdge]


# ---------------------------------------------------------------------------------------------
# Procedures, users, operations


class SuggestionResponse(BaseModel):
    suggestion: Suggestion | None


class ForgetReport(BaseModel):
    rows: dict[str, int] = Field(description='rows removed per "schema.table"')
    redis_keys: int
    total: int


class ExtractionStatus(_Open):
    user_id: str
    turns: int
    unscored: int
    unclaimed: int
    in_flight_batches: int
    retrying_batches: int
    failed_batches: int
    ingest_pending: int
    extract_after_turns: int
    caught_up: bool
    waiting_for_idle: bool


class JobRunView(_Open):
    job: str
    scope: str | None = None
    status: str
    rows: int
    errors: int
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = None


class Stats(_Open):
    tenant_id: str
    users: int
    current_memories: int
    rows: dict[str, int] = Field(description='rows per "schema.table" of this tenant')
    jobs: list[JobRunView]


class Health(_Open):
    status: Literal["ok", "degraded"]
    checks: dict[str, str] = Field(description='each dependency: "ok" or why not')
    schema_revision: str | None = Field(
        default=None, description="the database's Alembic revision (null when unreadable)"
    )
    schema_head: str | None = Field(default=None, description="the revision this code needs")
    unavailable: list[str] = Field(default_factory=list, description="the checks that failed (503)")
