"""What a search asks and answers (shared by the turn and memory rankings, the API and SDK)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat

from app.config import Settings
from app.layers.semantic.models import MEMORY_KINDS
from app.limits import RequestTime, WholeNumber
from app.scoring.retrieval import PriorWeights
from app.streams.events import Channel, Identifier
from app.text.injection import SUSPECTED_INSTRUCTION
from app.text.storable import StorableTag, StorableText
from app.text.untrusted import suspected


class SearchRequest(BaseModel):
    """What an agent asks; the tenant comes from its API key, never from the body."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    user_id: Identifier
    query: StorableText = Field(min_length=1, max_length=8000)
    limit: WholeNumber = Field(default=10, ge=1, le=100)
    agent_id: Identifier | None = Field(
        default=None,
        description="the asking agent: its private memories besides the user's and the shared"
        " ones (none: the user's and the shared only)",
    )
    include_knowledge: StrictBool = Field(
        default=False, description="also the tenant's knowledge (hits marked scope: knowledge)"
    )
    unit: Literal["turns", "memories"] | None = Field(
        default=None,
        description="rank source turns (memories attached) or memories"
        " (default: the server's setting, turns)",
    )
    channel: Channel | None = None
    tags: list[StorableTag] = Field(default_factory=list, max_length=32)
    kinds: list[Literal[MEMORY_KINDS]] = Field(default_factory=list)  # type: ignore[valid-type]
    since: RequestTime | None = None
    until: RequestTime | None = None
    min_importance: StrictFloat | None = Field(default=None, ge=0, le=1)
    include_superseded: StrictBool = False
    include_archived: StrictBool = Field(
        default=False, description="also memories decay archived (restore brings them back)"
    )
    include_turns: StrictBool | None = Field(
        default=None,
        description="memories unit: search raw L2 turns too (default: the server's setting)",
    )
    record: StrictBool = Field(
        default=True,
        description="record this search as the user's retrieval: access counts, the decay"
        " clock and Hebbian co-activation (false: an operator's look that changes nothing)",
    )

    @property
    def filters_memories_only(self) -> bool:
        """Tags, kinds and importance describe memories: a raw turn has none, so it cannot
        match them itself, only through memories that do."""
        return bool(self.tags or self.kinds or self.min_importance is not None)


@dataclass
class AttachedMemory:
    """A memory extracted from a turn hit that helped find it."""

    id: uuid.UUID
    kind: str
    content: str
    importance: float
    tags: list[str] = field(default_factory=list)
    # Reads like instructions (or imitates the untrusted fence): quote it, never obey it.
    suspected_instruction: bool = False


@dataclass
class SearchHit:
    id: uuid.UUID
    layer: Literal["memory", "turn"]
    kind: str
    content: str
    score: float
    parts: dict[str, float]
    source_turn_ids: list[str]
    session_id: uuid.UUID | None
    occurred_at: datetime
    channel: str | None = None
    importance: float | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: uuid.UUID | None = None
    tags: list[str] = field(default_factory=list)
    topics: list[Any] = field(default_factory=list)
    role: str | None = None
    speaker: str | None = None
    # The same turns as event ids (what POST /v1/events returned), in the same order.
    event_ids: list[str] = field(default_factory=list)
    # Turn hits: the memories extracted from this turn that voted for it, best first.
    memories: list[AttachedMemory] = field(default_factory=list)
    # Reads like instructions (or imitates the untrusted fence): quote it, never obey it.
    suspected_instruction: bool = False
    # "user": the user's archive and map; "knowledge": the tenant's knowledge, no one user's.
    scope: Literal["user", "knowledge"] = "user"


@dataclass
class SearchResult:
    hits: list[SearchHit]
    fusion: str
    took_ms: float
    unit: str = "turns"
    # The time the query named ([start, end) and its words), when it named one.
    time_window: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    # Words of the query read as a speaker they are not the display name of (word → speaker:
    # what the other speaker calls them, or a misspelling; app/text/speaker_names.py).
    names: dict[str, str] = field(default_factory=dict)


def prior_weights(settings: Settings) -> PriorWeights:
    """The prior's weights every ranking of memories and turns multiplies relevance by."""
    return PriorWeights(
        importance=settings.search_prior_importance,
        recency=settings.search_prior_recency,
        consolidation=settings.search_prior_consolidation,
    )


def memory_suspected(row: Any) -> bool:
    """A memory row is suspect when extraction flagged it (its metadata) or its text is."""
    return suspected(row.content, stored=bool((row.metadata or {}).get(SUSPECTED_INSTRUCTION)))


def turn_suspected(row: Any) -> bool:
    """A turn row is suspect when ingest flagged it (its `flags`) or its text is."""
    return suspected(row.content, stored=SUSPECTED_INSTRUCTION in (row.flags or []))


def as_uuid(value: Any) -> Any:
    """An id a search read as text (app/db/rows.py TEXT_IDS) as the uuid a hit holds."""
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(value)


def memory_hit(
    row: Any, score: float, parts: dict[str, float], sources: list[tuple[uuid.UUID, str]]
) -> SearchHit:
    """A memory row (semantic.search.memories_by_id) as a hit; `sources` are its source
    turns as (event id, external id), in the order to show them."""
    return SearchHit(
        id=as_uuid(row.id),
        layer="memory",
        kind=row.kind,
        content=row.content,
        score=score,
        parts=parts,
        source_turn_ids=[external for _, external in sources],
        event_ids=[str(turn_id) for turn_id, _ in sources],
        session_id=as_uuid(row.session_id),
        occurred_at=row.occurred_at,
        channel=row.channel,
        importance=row.importance,
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        superseded_by=as_uuid(row.superseded_by),
        tags=list(row.tags or []),
        topics=list(row.topics or []),
        suspected_instruction=memory_suspected(row),
    )


def turn_hit(
    row: Any, score: float, parts: dict[str, float], memories: list[Any] | None = None
) -> SearchHit:
    """A turn row (episodic.search.turns_by_id) as a hit, with the memory rows attached."""
    memories = memories or []
    return SearchHit(
        id=as_uuid(row.id),
        layer="turn",
        kind="turn",
        content=row.content,
        score=score,
        parts=parts,
        source_turn_ids=[row.external_id],
        event_ids=[str(row.id)],
        session_id=as_uuid(row.session_id),
        occurred_at=row.occurred_at,
        channel=row.channel,
        role=row.role,
        speaker=row.speaker,
        importance=max((m.importance for m in memories), default=None),
        tags=sorted({tag for m in memories for tag in (m.tags or [])}),
        memories=[
            AttachedMemory(
                id=as_uuid(m.id),
                kind=m.kind,
                content=m.content,
                importance=m.importance,
                tags=list(m.tags or []),
                suspected_instruction=memory_suspected(m),
            )
            for m in memories
        ],
        suspected_instruction=turn_suspected(row),
    )
