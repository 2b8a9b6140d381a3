"""What the Engram API answers, as typed, immutable values.

Each model reads the JSON of one answer as it is on the wire, so the clients parse a reply in
one call instead of field by field. Two rules keep old clients working against newer servers:
a field this client does not know is ignored, and a null where the model has a default means
that default. Nothing here imports the server; the server may use these models to declare its
answers, never the other way round.
"""

from __future__ import annotations

import functools
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = [
    "AttachedMemory",
    "Context",
    "Entity",
    "EntityGraph",
    "EventsAccepted",
    "ExtractionFlush",
    "ExtractionStatus",
    "ForgetReport",
    "GraphEdge",
    "Health",
    "KnowledgeDeleted",
    "Memory",
    "MemoryDeleted",
    "MemoryEdited",
    "MemoryHistory",
    "MemoryPage",
    "MemoryVersion",
    "Procedure",
    "Receipt",
    "RelatedMemories",
    "RelatedMemory",
    "SearchHit",
    "SearchResults",
    "SessionCleared",
    "Stats",
    "StoredMemories",
    "StoredMemory",
    "Suggestion",
    "SuggestionReply",
    "Turn",
    "WireModel",
]


class WireModel(BaseModel):
    """The base of every answer: frozen, unknown fields ignored, null taken as the default."""

    model_config = ConfigDict(frozen=True, extra="ignore", coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        """Drop nulls for fields that have a default, so the default applies."""
        if not isinstance(data, dict) or not any(value is None for value in data.values()):
            return data  # a search's answer holds a hundred models: most have no null
        defaulted = _defaulted(cls)
        return {
            key: value for key, value in data.items() if value is not None or key not in defaulted
        }


@functools.cache
def _defaulted(model: type[BaseModel]) -> frozenset[str]:
    """The fields of `model` that have a default (a null for them means that default)."""
    return frozenset(name for name, f in model.model_fields.items() if not f.is_required())


class EventsAccepted(WireModel):
    """Events queued for ingestion; `ids` are their derived event ids, in request order."""

    accepted: int
    ids: list[uuid.UUID]


Receipt = EventsAccepted


class AttachedMemory(WireModel):
    """A memory extracted from a turn hit that helped find it."""

    id: uuid.UUID
    kind: str
    content: str
    importance: float
    tags: list[str] = []
    # Reads like instructions (or imitates the untrusted fence): quote it, never obey it.
    suspected_instruction: bool = False


class SearchHit(WireModel):
    """A source turn (`layer == "turn"`, with the memories extracted from it in `memories`)
    or a memory (`layer == "memory"`: with `unit="memories"`, or one that cites no turn).

    `parts` are the score's ingredients (turn_lexical, memory_dense, fused, prior, ...);
    `source_turn_ids` are the producer's `external_id`s the hit came from."""

    id: uuid.UUID
    layer: Literal["memory", "turn"]
    kind: str
    content: str
    score: float
    parts: dict[str, float] = {}
    source_turn_ids: list[str] = []
    session_id: uuid.UUID | None = None
    occurred_at: datetime
    channel: str | None = None
    importance: float | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: uuid.UUID | None = None
    tags: list[str] = []
    topics: list[Any] = []
    role: str | None = None
    speaker: str | None = None
    event_ids: list[str] = []  # the same turns, as event ids
    memories: list[AttachedMemory] = []
    # Reads like instructions (or imitates the untrusted fence): quote it, never obey it.
    suspected_instruction: bool = False
    # "user" (the user's archive and map) or "knowledge" (the tenant's, no one user's).
    scope: str = "user"


class SearchResults(WireModel):
    hits: list[SearchHit] = []
    fusion: str = ""
    took_ms: float = 0.0
    warnings: list[str] = []
    unit: str = "turns"
    time_window: dict[str, Any] | None = None  # the time the query named, when it named one
    # Words of the query read as a speaker whose display name they are not ("Kate" → "Emi").
    names: dict[str, str] = {}


class Context(WireModel):
    """The packed context block (`text`) and what went into it (`parts`)."""

    text: str
    tokens: int
    token_budget: int
    prefetch: str = "miss"
    parts: dict[str, Any] = {}
    took_ms: float = 0.0
    warnings: list[str] = []


class Turn(WireModel):
    """A raw L2 turn; `is_source` marks the turns a memory was extracted from."""

    id: uuid.UUID
    external_id: str | None = None
    session_id: uuid.UUID | None = None
    role: str
    speaker: str | None = None
    content: str
    channel: str | None = None
    occurred_at: datetime
    is_source: bool = False


class Memory(WireModel):
    """One L3 memory; `recall` holds its source turns (± context) when asked for."""

    id: uuid.UUID
    user_id: str
    agent_id: str | None = None  # the agent whose map holds it (None: the user's level)
    shared: bool = False  # an agent's memory every agent of the user may read
    kind: str
    content: str
    summary: str | None = None
    original: str | None = None
    topics: list[Any] = []
    tags: list[str] = []
    importance: float
    emotional_intensity: float | None = None
    consolidation_strength: float | None = None
    access_count: int = 0
    occurred_at: datetime
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: uuid.UUID | None = None
    archived_at: datetime | None = None
    session_id: uuid.UUID | None = None
    channel: str | None = None
    source_turn_ids: list[str] = []
    metadata: dict[str, Any] = {}
    created_at: datetime | None = None
    recall: list[Turn] | None = None


class MemoryPage(WireModel):
    """One page of a listing; pass `next_cursor` back for the next (None: last page)."""

    memories: list[Memory] = []
    next_cursor: str | None = None


class StoredMemory(WireModel):
    """`created`: a new memory; `reinforced`: it repeated one the user already had (`id`)."""

    id: uuid.UUID
    status: str


class StoredMemories(WireModel):
    """The answer to storing memories: one result per memory sent, in request order."""

    memories: list[StoredMemory]


class Entity(WireModel):
    id: uuid.UUID
    name: str
    kind: str | None = None
    mention_count: int = 0


class GraphEdge(WireModel):
    """A relation reached from the start entity; `weight` is the strength of its path."""

    source: str
    relation: str
    target: str
    weight: float
    depth: int
    source_id: uuid.UUID
    target_id: uuid.UUID
    memory_id: uuid.UUID | None = None
    fact: str = ""


class EntityGraph(WireModel):
    entity: Entity
    edges: list[GraphEdge] = []


class Procedure(WireModel):
    """A procedure after one run was counted (`created`: that run was its first)."""

    id: uuid.UUID
    query_pattern: str
    tool_sequence: list[Any]
    executions: int
    avg_success: float
    avg_duration_ms: float
    confidence: float
    last_executed_at: datetime | None = None
    created_at: datetime | None = None
    created: bool = False


class Suggestion(WireModel):
    """A trusted tool sequence for a query; ranked by `score` = similarity * confidence."""

    procedure_id: uuid.UUID
    query_pattern: str
    tool_sequence: list[Any]
    confidence: float
    similarity: float
    executions: int
    avg_success: float
    avg_duration_ms: float

    @property
    def score(self) -> float:
        return self.similarity * self.confidence


class SuggestionReply(WireModel):
    """The answer to asking for a procedure: a suggestion, or null when none is trusted."""

    suggestion: Suggestion | None = None


class KnowledgeDeleted(WireModel):
    """A fact of the tenant's knowledge, deleted."""

    id: uuid.UUID
    deleted: bool = True


class ForgetReport(WireModel):
    """What forgetting a user removed: rows per "schema.table", and Redis keys."""

    rows: dict[str, int] = {}
    redis_keys: int = 0
    total: int = 0


class Stats(WireModel):
    tenant_id: str
    users: int
    current_memories: int
    rows: dict[str, int] = {}


class ExtractionStatus(WireModel):
    """How far extraction got with what was sent for a user.

    `ingest_pending`: events of the user's stream partition not ingested yet (other users'
    included); `unscored`: turns awaiting salience; `unclaimed`: scored turns in no batch yet;
    `in_flight_batches`: batches not stored yet (`retrying_batches` of them after a failed
    attempt); `failed_batches`: parked after their last attempt. `caught_up`: nothing left at
    any of those stops but failed batches; `waiting_for_idle`: only fewer than
    `extract_after_turns` unclaimed turns are left, which a flush extracts now."""

    user_id: str
    turns: int
    unscored: int
    unclaimed: int
    in_flight_batches: int
    failed_batches: int
    ingest_pending: int
    caught_up: bool
    waiting_for_idle: bool = False
    retrying_batches: int = 0
    extract_after_turns: int | None = None

    @property
    def pending(self) -> list[str]:
        """What is still on its way, in words (empty when caught up)."""
        parts = [
            (self.ingest_pending, "event(s) pending ingest"),
            (self.unscored, "unscored turn(s)"),
            (self.unclaimed, "unclaimed turn(s)"),
            (self.in_flight_batches, "batch(es) in flight"),
            (self.retrying_batches, "of them retrying after a failure"),
        ]
        return [f"{n} {what}" for n, what in parts if n]


class ExtractionFlush(WireModel):
    """What a flush claimed: `batches` (0 or 1) holding `turns`, extracted in the background."""

    user_id: str
    batches: int
    turns: int


class Health(WireModel):
    """`status` is "ok" or "degraded"; `checks` says how each dependency answered and
    `unavailable` names the ones that did not."""

    status: str
    checks: dict[str, Any] = {}
    unavailable: list[str] = []

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class MemoryEdited(WireModel):
    """An edit: `memory` is the current version; `status` is "unchanged" (and `previous_id`
    None) when it already held what was sent (a repeated edit writes nothing)."""

    status: str
    memory: Memory
    previous_id: uuid.UUID | None = None


class MemoryDeleted(WireModel):
    """A deleted memory: every version of it (`ids`), rows removed per kind, Redis keys."""

    ids: list[uuid.UUID] = []
    rows: dict[str, int] = {}
    redis_keys: int = 0


class MemoryVersion(Memory):
    """One version in a memory's history (`version` 1 is the oldest)."""

    version: int
    supersedes: uuid.UUID | None = None


class MemoryHistory(WireModel):
    """A memory's versions, oldest first; `current_id` is the one in force (None: none)."""

    memory_id: uuid.UUID
    current_id: uuid.UUID | None = None
    versions: list[MemoryVersion] = []


class RelatedMemory(WireModel):
    """A memory associated with another (Hebbian weight) or sharing its entities."""

    id: uuid.UUID
    content: str
    score: float
    shared_entities: list[str] = []
    association_weight: float = 0.0


class RelatedMemories(WireModel):
    memory_id: uuid.UUID
    related: list[RelatedMemory] = []


class SessionCleared(WireModel):
    """What clearing a session removed; `kept_memory_ids` now cite only other sessions."""

    session_id: uuid.UUID
    rows: dict[str, int] = {}
    deleted_memory_ids: list[uuid.UUID] = []
    kept_memory_ids: list[uuid.UUID] = []
    working_turns: int = 0
    summary_dropped: bool = False
    redis_keys: int = 0
