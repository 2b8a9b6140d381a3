"""Python SDK for the Engram REST API: `EngramClient` (blocking) and `AsyncEngramClient`.

    with EngramClient("http://127.0.0.1:8080", api_key) as engram:
        engram.add_turn("alice", "I moved to Lisbon", external_id="msg-1")
        engram.remember("alice", ["Alice prefers PostgreSQL"])
        hits = engram.search("alice", "where does Alice live?").hits

Both clients share one implementation: every operation is written once, as a generator that
yields what to do next (send a request, or sleep) and receives what happened (the response,
or the transport error). The sync client drives that generator with `httpx.Client` and
`time.sleep`, the async one with `httpx.AsyncClient` and `asyncio.sleep`; request building,
retries, polling and response parsing never exist twice.

Retries: connection errors, timeouts and 5xx answers are retried with exponential backoff
(jittered; a `Retry-After` header is honoured up to `MAX_RETRY_AFTER_S`); a 4xx answer is
never retried, since repeating the same request cannot change it.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx

__all__ = [
    "AsyncEngramClient",
    "AuthenticationError",
    "Context",
    "EngramClient",
    "EngramError",
    "Entity",
    "EntityGraph",
    "EventsAccepted",
    "ExtractionFlush",
    "ExtractionStatus",
    "ForgetReport",
    "GraphEdge",
    "Health",
    "Memory",
    "MemoryPage",
    "NotFoundError",
    "PayloadTooLargeError",
    "Procedure",
    "Receipt",
    "SearchHit",
    "SearchResults",
    "Stats",
    "StoredMemory",
    "Suggestion",
    "Turn",
    "UnavailableError",
    "ValidationError",
]

MAX_RETRY_AFTER_S = 20.0  # the longest pause a Retry-After header can impose
MAX_BACKOFF_S = 10.0
SENT_TURNS_KEPT = 10_000  # turns remembered for `wait_until_indexed` (oldest forgotten first)
USER_AGENT = "engram-python/1"

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
# Errors


class EngramError(Exception):
    """An answer the API refused, or no answer at all (`status` is None then).

    `fields` names the offending request fields when the API said which ones (422);
    `detail` is the API's whole `detail` payload, for anything else it carried."""

    def __init__(
        self,
        status: int | None,
        message: str,
        fields: Sequence[str] | None = None,
        *,
        detail: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields: list[str] = list(fields or [])
        self.detail = detail

    def __str__(self) -> str:
        where = f" ({', '.join(self.fields)})" if self.fields else ""
        prefix = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{prefix}{self.message}{where}"


class AuthenticationError(EngramError):
    """401: the API key is missing, unknown or revoked."""


class NotFoundError(EngramError):
    """404: no such memory or entity for this key's tenant (another tenant's looks the same)."""


class ValidationError(EngramError):
    """422: the request was malformed; `fields` lists the offending fields."""


class PayloadTooLargeError(EngramError):
    """413: the request body is over the server's limit; send fewer events per call."""


class UnavailableError(EngramError):
    """503 after every retry, or the server could not be reached at all (`status` None)."""


_ERRORS: dict[int, type[EngramError]] = {
    401: AuthenticationError,
    404: NotFoundError,
    413: PayloadTooLargeError,
    422: ValidationError,
    503: UnavailableError,
}

# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class EventsAccepted:
    """Events queued for ingestion; `ids` are their derived event ids, in request order."""

    accepted: int
    ids: list[uuid.UUID]


Receipt = EventsAccepted


@dataclass(frozen=True)
class AttachedMemory:
    """A memory extracted from a turn hit that helped find it."""

    id: uuid.UUID
    kind: str
    content: str
    importance: float
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SearchHit:
    """A source turn (`layer == "turn"`, with the memories extracted from it in `memories`)
    or a memory (`layer == "memory"`: with `unit="memories"`, or one that cites no turn).

    `parts` are the score's ingredients (turn_lexical, memory_dense, fused, prior, ...);
    `source_turn_ids` are the producer's `external_id`s the hit came from."""

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
    event_ids: list[str] = field(default_factory=list)  # the same turns, as event ids
    memories: list[AttachedMemory] = field(default_factory=list)


@dataclass(frozen=True)
class SearchResults:
    hits: list[SearchHit]
    fusion: str
    took_ms: float
    warnings: list[str] = field(default_factory=list)
    unit: str = "turns"
    time_window: dict[str, Any] | None = None  # the time the query named, when it named one


@dataclass(frozen=True)
class Context:
    """The packed context block (`text`) and what went into it (`parts`)."""

    text: str
    tokens: int
    token_budget: int
    prefetch: str
    parts: dict[str, Any]
    took_ms: float
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Turn:
    """A raw L2 turn; `is_source` marks the turns a memory was extracted from."""

    id: uuid.UUID
    external_id: str | None
    session_id: uuid.UUID | None
    role: str
    speaker: str | None
    content: str
    channel: str | None
    occurred_at: datetime
    is_source: bool = False


@dataclass(frozen=True)
class Memory:
    """One L3 memory; `recall` holds its source turns (± context) when asked for."""

    id: uuid.UUID
    user_id: str
    kind: str
    content: str
    summary: str | None
    original: str | None
    topics: list[Any]
    tags: list[str]
    importance: float
    emotional_intensity: float | None
    consolidation_strength: float | None
    access_count: int
    occurred_at: datetime
    valid_from: datetime | None
    valid_to: datetime | None
    superseded_by: uuid.UUID | None
    archived_at: datetime | None
    session_id: uuid.UUID | None
    channel: str | None
    source_turn_ids: list[str]
    metadata: dict[str, Any]
    created_at: datetime | None
    recall: list[Turn] | None = None


@dataclass(frozen=True)
class MemoryPage:
    """One page of a listing; pass `next_cursor` back for the next (None: last page)."""

    memories: list[Memory]
    next_cursor: str | None


@dataclass(frozen=True)
class StoredMemory:
    """`created`: a new memory; `reinforced`: it repeated one the user already had (`id`)."""

    id: uuid.UUID
    status: str


@dataclass(frozen=True)
class Entity:
    id: uuid.UUID
    name: str
    kind: str | None
    mention_count: int


@dataclass(frozen=True)
class GraphEdge:
    """A relation reached from the start entity; `weight` is the strength of its path."""

    source: str
    relation: str
    target: str
    weight: float
    depth: int
    source_id: uuid.UUID
    target_id: uuid.UUID
    memory_id: uuid.UUID | None
    fact: str


@dataclass(frozen=True)
class EntityGraph:
    entity: Entity
    edges: list[GraphEdge]


@dataclass(frozen=True)
class Procedure:
    """A procedure after one run was counted (`created`: that run was its first)."""

    id: uuid.UUID
    query_pattern: str
    tool_sequence: list[Any]
    executions: int
    avg_success: float
    avg_duration_ms: float
    confidence: float
    last_executed_at: datetime | None
    created_at: datetime | None
    created: bool = False


@dataclass(frozen=True)
class Suggestion:
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


@dataclass(frozen=True)
class ForgetReport:
    """What forgetting a user removed: rows per "schema.table", and Redis keys."""

    rows: dict[str, int]
    redis_keys: int
    total: int


@dataclass(frozen=True)
class Stats:
    tenant_id: str
    users: int
    current_memories: int
    rows: dict[str, int]


@dataclass(frozen=True)
class ExtractionStatus:
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


@dataclass(frozen=True)
class ExtractionFlush:
    """What a flush claimed: `batches` (0 or 1) holding `turns`, extracted in the background."""

    user_id: str
    batches: int
    turns: int


@dataclass(frozen=True)
class Health:
    """`status` is "ok" or "degraded"; `checks` says which dependency failed."""

    status: str
    checks: dict[str, str]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ---------------------------------------------------------------------------------------------
# Parsing


def _uuid(value: Any) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(str(value))


def _id(value: Any) -> uuid.UUID:
    return uuid.UUID(str(value))


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))


def _at(value: Any) -> datetime:
    return datetime.fromisoformat(str(value))


def _hit(raw: Mapping[str, Any]) -> SearchHit:
    return SearchHit(
        id=_id(raw["id"]),
        layer=raw["layer"],
        kind=raw["kind"],
        content=raw["content"],
        score=float(raw["score"]),
        parts={k: float(v) for k, v in (raw.get("parts") or {}).items()},
        source_turn_ids=[str(s) for s in raw.get("source_turn_ids") or []],
        session_id=_uuid(raw.get("session_id")),
        occurred_at=_at(raw["occurred_at"]),
        channel=raw.get("channel"),
        importance=raw.get("importance"),
        valid_from=_time(raw.get("valid_from")),
        valid_to=_time(raw.get("valid_to")),
        superseded_by=_uuid(raw.get("superseded_by")),
        tags=list(raw.get("tags") or []),
        topics=list(raw.get("topics") or []),
        role=raw.get("role"),
        speaker=raw.get("speaker"),
        event_ids=[str(s) for s in raw.get("event_ids") or []],
        memories=[
            AttachedMemory(
                id=_id(m["id"]),
                kind=m["kind"],
                content=m["content"],
                importance=float(m["importance"]),
                tags=list(m.get("tags") or []),
            )
            for m in raw.get("memories") or []
        ],
    )


def _search_results(raw: Mapping[str, Any]) -> SearchResults:
    return SearchResults(
        hits=[_hit(h) for h in raw.get("hits") or []],
        fusion=raw.get("fusion", ""),
        took_ms=float(raw.get("took_ms", 0.0)),
        warnings=list(raw.get("warnings") or []),
        unit=raw.get("unit", "turns"),
        time_window=raw.get("time_window"),
    )


def _context(raw: Mapping[str, Any]) -> Context:
    return Context(
        text=raw["text"],
        tokens=int(raw["tokens"]),
        token_budget=int(raw["token_budget"]),
        prefetch=raw.get("prefetch", "miss"),
        parts=dict(raw.get("parts") or {}),
        took_ms=float(raw.get("took_ms", 0.0)),
        warnings=list(raw.get("warnings") or []),
    )


def _turn(raw: Mapping[str, Any]) -> Turn:
    return Turn(
        id=_id(raw["id"]),
        external_id=raw.get("external_id"),
        session_id=_uuid(raw.get("session_id")),
        role=raw["role"],
        speaker=raw.get("speaker"),
        content=raw["content"],
        channel=raw.get("channel"),
        occurred_at=_at(raw["occurred_at"]),
        is_source=bool(raw.get("is_source", False)),
    )


def _memory(raw: Mapping[str, Any]) -> Memory:
    recall = raw.get("recall")
    return Memory(
        id=_id(raw["id"]),
        user_id=raw["user_id"],
        kind=raw["kind"],
        content=raw["content"],
        summary=raw.get("summary"),
        original=raw.get("original"),
        topics=list(raw.get("topics") or []),
        tags=list(raw.get("tags") or []),
        importance=float(raw["importance"]),
        emotional_intensity=raw.get("emotional_intensity"),
        consolidation_strength=raw.get("consolidation_strength"),
        access_count=int(raw.get("access_count") or 0),
        occurred_at=_at(raw["occurred_at"]),
        valid_from=_time(raw.get("valid_from")),
        valid_to=_time(raw.get("valid_to")),
        superseded_by=_uuid(raw.get("superseded_by")),
        archived_at=_time(raw.get("archived_at")),
        session_id=_uuid(raw.get("session_id")),
        channel=raw.get("channel"),
        source_turn_ids=[str(s) for s in raw.get("source_turn_ids") or []],
        metadata=dict(raw.get("metadata") or {}),
        created_at=_time(raw.get("created_at")),
        recall=None if recall is None else [_turn(t) for t in recall],
    )


def _memory_page(raw: Mapping[str, Any]) -> MemoryPage:
    return MemoryPage(
        memories=[_memory(m) for m in raw.get("memories") or []],
        next_cursor=raw.get("next_cursor"),
    )


def _entity_graph(raw: Mapping[str, Any]) -> EntityGraph:
    entity = raw["entity"]
    return EntityGraph(
        entity=Entity(
            id=_id(entity["id"]),
            name=entity["name"],
            kind=entity.get("kind"),
            mention_count=int(entity.get("mention_count") or 0),
        ),
        edges=[
            GraphEdge(
                source=e["source"],
                relation=e["relation"],
                target=e["target"],
                weight=float(e["weight"]),
                depth=int(e["depth"]),
                source_id=_id(e["source_id"]),
                target_id=_id(e["target_id"]),
                memory_id=_uuid(e.get("memory_id")),
                fact=e.get("fact", ""),
            )
            for e in raw.get("edges") or []
        ],
    )


def _procedure(raw: Mapping[str, Any]) -> Procedure:
    return Procedure(
        id=_id(raw["id"]),
        query_pattern=raw["query_pattern"],
        tool_sequence=list(raw["tool_sequence"]),
        executions=int(raw["executions"]),
        avg_success=float(raw["avg_success"]),
        avg_duration_ms=float(raw["avg_duration_ms"]),
        confidence=float(raw["confidence"]),
        last_executed_at=_time(raw.get("last_executed_at")),
        created_at=_time(raw.get("created_at")),
        created=bool(raw.get("created", False)),
    )


def _suggestion(raw: Mapping[str, Any]) -> Suggestion | None:
    found = raw.get("suggestion")
    if found is None:
        return None
    return Suggestion(
        procedure_id=_id(found["procedure_id"]),
        query_pattern=found["query_pattern"],
        tool_sequence=list(found["tool_sequence"]),
        confidence=float(found["confidence"]),
        similarity=float(found["similarity"]),
        executions=int(found["executions"]),
        avg_success=float(found["avg_success"]),
        avg_duration_ms=float(found["avg_duration_ms"]),
    )


def _events_accepted(raw: Mapping[str, Any]) -> EventsAccepted:
    return EventsAccepted(accepted=int(raw["accepted"]), ids=[_id(i) for i in raw["ids"]])


def _stored(raw: Mapping[str, Any]) -> list[StoredMemory]:
    return [StoredMemory(id=_id(m["id"]), status=m["status"]) for m in raw["memories"]]


def _forget_report(raw: Mapping[str, Any]) -> ForgetReport:
    return ForgetReport(
        rows={k: int(v) for k, v in (raw.get("rows") or {}).items()},
        redis_keys=int(raw.get("redis_keys") or 0),
        total=int(raw.get("total") or 0),
    )


def _stats(raw: Mapping[str, Any]) -> Stats:
    return Stats(
        tenant_id=raw["tenant_id"],
        users=int(raw["users"]),
        current_memories=int(raw["current_memories"]),
        rows={k: int(v) for k, v in (raw.get("rows") or {}).items()},
    )


def _extraction_status(raw: Mapping[str, Any]) -> ExtractionStatus:
    after = raw.get("extract_after_turns")
    return ExtractionStatus(
        user_id=str(raw["user_id"]),
        turns=int(raw["turns"]),
        unscored=int(raw["unscored"]),
        unclaimed=int(raw["unclaimed"]),
        in_flight_batches=int(raw["in_flight_batches"]),
        failed_batches=int(raw["failed_batches"]),
        ingest_pending=int(raw["ingest_pending"]),
        caught_up=bool(raw["caught_up"]),
        waiting_for_idle=bool(raw.get("waiting_for_idle", False)),
        retrying_batches=int(raw.get("retrying_batches") or 0),
        extract_after_turns=None if after is None else int(after),
    )


def _extraction_flush(raw: Mapping[str, Any]) -> ExtractionFlush:
    return ExtractionFlush(
        user_id=str(raw["user_id"]), batches=int(raw["batches"]), turns=int(raw["turns"])
    )


def _health(raw: Mapping[str, Any]) -> Health:
    return Health(status=str(raw.get("status")), checks=dict(raw.get("checks") or {}))


def _jsonable(value: Any) -> Any:
    """Datetimes as ISO 8601 (naive ones taken as UTC, as the API does), UUIDs as text."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _error(response: httpx.Response) -> EngramError:
    """The typed error for a refused request, with the API's message and fields."""
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    fields: list[str] = []
    if isinstance(detail, dict):
        message = str(detail.get("message") or detail)
        fields = [str(f) for f in detail.get("fields") or []]
    elif isinstance(detail, str):
        message = detail
    elif isinstance(detail, list):  # FastAPI's default shape, should a route ever use it
        message = "; ".join(str(e.get("msg", e)) for e in detail if isinstance(e, dict))
        fields = [".".join(str(p) for p in e.get("loc", ())[1:]) for e in detail]
    else:
        message = response.text[:500] or response.reason_phrase
    kind = _ERRORS.get(response.status_code, EngramError)
    return kind(response.status_code, message, fields, detail=detail)


def _json_body(response: httpx.Response) -> Any:
    """The decoded body of an answer; one that is not JSON did not come from the API."""
    try:
        return response.json()
    except ValueError:
        raise EngramError(
            response.status_code,
            f"the reply is not JSON (is {response.url} the Engram API?): {response.text[:200]}",
        ) from None


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None if absent/bad."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


# ---------------------------------------------------------------------------------------------
# The shared implementation


@dataclass(frozen=True)
class _Send:
    """Step: send this request (the driver builds it with its own httpx client)."""

    method: str
    path: str
    params: dict[str, Any] | None
    content: bytes | None


@dataclass(frozen=True)
class _Sleep:
    """Step: wait this long (between retries, or between polls)."""

    seconds: float


_Outcome = httpx.Response | httpx.TransportError | None
_Op = Generator[_Send | _Sleep, _Outcome, T]


class _Core:
    """Everything both clients do, as operations (generators) their drivers run."""

    def __init__(self, *, retries: int, backoff: float) -> None:
        if retries < 0 or backoff < 0:
            raise ValueError("retries and backoff must not be negative")
        self.retries = retries
        self.backoff = backoff
        self._lock = threading.Lock()
        # (user_id, external_id) -> content of turns this client sent, so that
        # `wait_until_indexed` can search for them without being given a query.
        self._sent: OrderedDict[tuple[str, str], str] = OrderedDict()

    # -- transport ----------------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotent: bool = True,
        answers: frozenset[int] = frozenset(),
    ) -> _Op[Any]:
        """Send with retries and return the decoded JSON body, or raise a typed error.

        A request that is not idempotent is retried only when it surely did not reach the
        server (connect errors) or the server answered 5xx (it rolled its transaction back);
        a read timeout might hide a success, and repeating it could count it twice.
        `answers` are non-2xx statuses that are results, not errors (no retry either)."""
        query = {k: _jsonable(v) for k, v in (params or {}).items() if v is not None}
        content = None if body is None else json.dumps(_jsonable(body)).encode()
        step = _Send(method, path, query or None, content)
        attempt = 0
        while True:
            outcome = yield step
            if isinstance(outcome, httpx.Response) and (
                outcome.is_success or outcome.status_code in answers
            ):
                return _json_body(outcome)
            delay = self._retry_delay(outcome, attempt, idempotent)
            if delay is None or attempt >= self.retries:
                break
            attempt += 1
            yield _Sleep(delay)
        if isinstance(outcome, httpx.Response):
            raise _error(outcome)
        raise UnavailableError(
            None, f"could not reach the Engram API ({type(outcome).__name__}: {outcome})"
        ) from outcome

    def _retry_delay(self, outcome: _Outcome, attempt: int, idempotent: bool) -> float | None:
        """Seconds to wait before the next attempt, or None when retrying cannot help."""
        wait = min(self.backoff * 2**attempt, MAX_BACKOFF_S) * random.uniform(0.5, 1.0)
        if isinstance(outcome, httpx.TransportError):
            safe = isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout)
            return wait if idempotent or safe else None
        if isinstance(outcome, httpx.Response) and outcome.status_code >= 500:
            asked = _retry_after(outcome.headers.get("Retry-After"))
            if asked is not None:
                wait = max(wait, min(asked, MAX_RETRY_AFTER_S))
            return wait
        return None  # 4xx: the same request gets the same answer

    # -- operations ---------------------------------------------------------------------------

    def send_events(self, events: Sequence[Mapping[str, Any]]) -> _Op[EventsAccepted]:
        # Retrying POST /v1/events is safe: the server derives each event's id from its
        # external_id (or, without one, from its content) and ingestion skips ids it already
        # has. For the content-derived ids to match across retries, every event gets its
        # timestamp here, once, instead of the server stamping each attempt with its own clock.
        now = datetime.now(UTC)
        batch = [{**e, "timestamp": now} if e.get("timestamp") is None else dict(e) for e in events]
        raw = yield from self.call("POST", "/v1/events", body={"events": batch})
        accepted = _events_accepted(raw)
        self._note_turns(batch)
        return accepted

    def _note_turns(self, events: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            for event in events:
                user, external, content = (
                    event.get("user_id"),
                    event.get("external_id"),
                    event.get("content"),
                )
                if event.get("type") != "turn" or not (user and external and content):
                    continue
                key = (str(user), str(external))
                self._sent[key] = str(content)
                self._sent.move_to_end(key)
                while len(self._sent) > SENT_TURNS_KEPT:
                    self._sent.popitem(last=False)

    @staticmethod
    def turn_event(
        user_id: str,
        content: str,
        *,
        role: str,
        external_id: str,
        channel: str,
        timestamp: datetime | None,
        speaker: str | None,
    ) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": "turn",
            "user_id": user_id,
            "role": role,
            "content": content,
            "external_id": external_id,
            "channel": channel,
        }
        if timestamp is not None:
            event["timestamp"] = timestamp
        if speaker is not None:
            event["speaker"] = speaker
        return event

    def search(self, user_id: str, query: str, **options: Any) -> _Op[SearchResults]:
        body = {"user_id": user_id, "query": query}
        body.update({k: v for k, v in options.items() if v is not None})
        raw = yield from self.call("POST", "/v1/search", body=body)
        return _search_results(raw)

    def context(
        self, user_id: str, query: str, channel: str | None, token_budget: int | None
    ) -> _Op[Context]:
        body = {
            "user_id": user_id,
            "query": query,
            "channel": channel,
            "token_budget": token_budget,
        }
        body = {k: v for k, v in body.items() if v is not None}
        raw = yield from self.call("POST", "/v1/context", body=body)
        return _context(raw)

    def remember(
        self, user_id: str, memories: Sequence[Mapping[str, Any] | str]
    ) -> _Op[list[StoredMemory]]:
        # Retried like a read: a repeat of a stored memory is folded into it ("reinforced"),
        # it never adds a second row.
        items = [{"content": m} if isinstance(m, str) else dict(m) for m in memories]
        raw = yield from self.call(
            "POST", "/v1/memories", body={"user_id": user_id, "memories": items}
        )
        return _stored(raw)

    def get_memory(self, memory_id: uuid.UUID | str, recall: int | None) -> _Op[Memory]:
        path = f"/v1/memories/{quote(str(memory_id), safe='')}"
        raw = yield from self.call("GET", path, params={"recall": recall})
        return _memory(raw)

    def list_memories(
        self, user_id: str, limit: int, cursor: str | None, include_superseded: bool
    ) -> _Op[MemoryPage]:
        params = {
            "user_id": user_id,
            "limit": limit,
            "cursor": cursor,
            "include_superseded": "true" if include_superseded else None,
        }
        raw = yield from self.call("GET", "/v1/memories", params=params)
        return _memory_page(raw)

    def entity_graph(self, user_id: str, name: str, depth: int, limit: int) -> _Op[EntityGraph]:
        path = f"/v1/entities/{quote(name, safe='')}/graph"
        params = {"user_id": user_id, "depth": depth, "limit": limit}
        raw = yield from self.call("GET", path, params=params)
        return _entity_graph(raw)

    def record_procedure(
        self,
        user_id: str,
        query: str,
        tool_sequence: Sequence[str | Mapping[str, Any]],
        success: float,
        duration_ms: float,
    ) -> _Op[Procedure]:
        body = {
            "user_id": user_id,
            "query": query,
            "tool_sequence": list(tool_sequence),
            "success": float(success),
            "duration_ms": float(duration_ms),
        }
        # Not idempotent: each call counts one more run of the sequence.
        raw = yield from self.call("POST", "/v1/procedures", body=body, idempotent=False)
        return _procedure(raw)

    def suggest_procedure(
        self, user_id: str, query: str, min_confidence: float | None
    ) -> _Op[Suggestion | None]:
        params = {"user_id": user_id, "query": query, "min_confidence": min_confidence}
        raw = yield from self.call("GET", "/v1/procedures/suggest", params=params)
        return _suggestion(raw)

    def forget_user(self, user_id: str) -> _Op[ForgetReport]:
        raw = yield from self.call("DELETE", f"/v1/users/{quote(user_id, safe='')}")
        with self._lock:
            for key in [k for k in self._sent if k[0] == user_id]:
                del self._sent[key]
        return _forget_report(raw)

    def stats(self) -> _Op[Stats]:
        raw = yield from self.call("GET", "/v1/stats")
        return _stats(raw)

    def extraction_status(self, user_id: str) -> _Op[ExtractionStatus]:
        raw = yield from self.call("GET", f"/v1/users/{quote(user_id, safe='')}/extraction")
        return _extraction_status(raw)

    def flush_extraction(self, user_id: str) -> _Op[ExtractionFlush]:
        # Retried like a read: a repeat claims only what the first left unclaimed.
        path = f"/v1/users/{quote(user_id, safe='')}/extraction/flush"
        raw = yield from self.call("POST", path)
        return _extraction_flush(raw)

    def wait_until_extracted(
        self, user_id: str, timeout: float, interval: float, flush: bool
    ) -> _Op[ExtractionStatus]:
        """Poll the extraction status until caught up; see the clients' docstrings."""
        deadline = time.monotonic() + timeout
        flushed = False
        while True:
            status = yield from self.extraction_status(user_id)
            if status.caught_up:
                return status
            if flush and not flushed and status.waiting_for_idle:
                # A flush that claimed nothing (the user was at its bound of batches in
                # flight) did not count: the leftovers still need one.
                flushed = (yield from self.flush_extraction(user_id)).batches > 0
            if time.monotonic() + interval > deadline:
                raise TimeoutError(
                    f"extraction for user {user_id!r} not caught up after {timeout:g}s: "
                    + ", ".join(status.pending)
                )
            yield _Sleep(interval)

    def health(self) -> _Op[Health]:
        # 503 is the answer "degraded" (with the failing checks), not a reason to retry.
        raw = yield from self.call("GET", "/healthz", answers=frozenset({503}))
        return _health(raw)

    def wait_until_indexed(
        self,
        user_id: str,
        query: str | None,
        external_ids: Sequence[str] | None,
        timeout: float,
        interval: float,
    ) -> _Op[list[SearchHit]]:
        """Poll search until what was sent is findable; see the clients' docstrings."""
        wanted = list(dict.fromkeys(external_ids or []))
        if not wanted and not query:
            raise ValueError("give a query, external_ids, or both")
        searches: dict[str, list[str]] = {}  # query -> external ids it should find
        if query:
            searches[query] = wanted
        else:
            with self._lock:
                known = {e: self._sent.get((user_id, e)) for e in wanted}
            unknown = [e for e, content in known.items() if content is None]
            if unknown:
                raise ValueError(
                    f"no query given and this client did not send turns {unknown} for "
                    f"user {user_id!r}: pass the query to search for"
                )
            for external_id, content in known.items():
                searches.setdefault(str(content), []).append(external_id)
        deadline = time.monotonic() + timeout
        while True:
            found: dict[str, SearchHit] = {}
            missing: list[str] = []
            for text, ids in searches.items():
                results = yield from self.search(
                    user_id, text, limit=100, include_turns=True if ids else None
                )
                if not ids:
                    if results.hits:
                        found[text] = results.hits[0]
                    else:
                        missing.append(f"a hit for query {text!r}")
                    continue
                for external_id in ids:
                    hit = next((h for h in results.hits if external_id in h.source_turn_ids), None)
                    if hit is None:
                        missing.append(f"turn {external_id!r}")
                    else:
                        found[external_id] = hit
            if not missing:
                return list({h.id: h for h in found.values()}.values())
            if time.monotonic() + interval > deadline:
                raise TimeoutError(
                    f"not searchable for user {user_id!r} after {timeout:g}s: " + ", ".join(missing)
                )
            yield _Sleep(interval)


_JSON = {"Content-Type": "application/json"}


def _client_headers(api_key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }


# ---------------------------------------------------------------------------------------------
# The clients


class EngramClient:
    """Blocking client. One instance per API key; safe to share between threads.

    `retries` is the number of extra attempts after a connection error, a timeout or a 5xx
    answer; `backoff` the first pause (doubling each time); `transport` an optional httpx
    transport (tests, proxies)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._core = _Core(retries=retries, backoff=backoff)
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=_client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    def _run(self, op: _Op[T]) -> T:
        outcome: _Outcome = None
        try:
            while True:
                step = op.send(outcome)
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    outcome = None
                    continue
                request = self._http.build_request(
                    step.method,
                    step.path,
                    params=step.params,
                    content=step.content,
                    headers=_JSON if step.content is not None else None,
                )
                try:
                    outcome = self._http.send(request)
                except httpx.TransportError as exc:
                    outcome = exc
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            op.close()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def send_events(self, events: Sequence[Mapping[str, Any]]) -> EventsAccepted:
        """Queue events for ingestion (`tenant_id` may be omitted: the key decides it).

        Searchable once a worker has ingested them; see `wait_until_indexed`."""
        return self._run(self._core.send_events(events))

    def add_turn(
        self,
        user_id: str,
        content: str,
        *,
        role: str = "user",
        external_id: str,
        channel: str = "default",
        timestamp: datetime | None = None,
        speaker: str | None = None,
    ) -> EventsAccepted:
        """Queue one conversation turn; `external_id` is your message id (makes it idempotent)."""
        event = _Core.turn_event(
            user_id,
            content,
            role=role,
            external_id=external_id,
            channel=channel,
            timestamp=timestamp,
            speaker=speaker,
        )
        return self.send_events([event])

    def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        channel: str | None = None,
        tags: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        min_importance: float | None = None,
        include_superseded: bool = False,
        include_turns: bool | None = None,
        unit: Literal["turns", "memories"] | None = None,
    ) -> SearchResults:
        """Hybrid search: the user's source turns with their memories attached (or memories,
        with `unit="memories"`)."""
        return self._run(
            self._core.search(
                user_id,
                query,
                unit=unit,
                limit=limit,
                channel=channel,
                tags=list(tags) if tags else None,
                kinds=list(kinds) if kinds else None,
                since=since,
                until=until,
                min_importance=min_importance,
                include_superseded=include_superseded,
                include_turns=include_turns,
            )
        )

    def context(
        self,
        user_id: str,
        query: str,
        *,
        channel: str | None = None,
        token_budget: int | None = None,
    ) -> Context:
        """The context block for the next answer, packed into the token budget."""
        return self._run(self._core.context(user_id, query, channel, token_budget))

    def remember(
        self, user_id: str, memories: Sequence[Mapping[str, Any] | str]
    ) -> list[StoredMemory]:
        """Store explicit memories (a string is `{"content": it}`); results in request order."""
        return self._run(self._core.remember(user_id, memories))

    def get_memory(self, memory_id: uuid.UUID | str, *, recall: int | None = None) -> Memory:
        """One memory; with `recall=N`, its source turns and N turns around them."""
        return self._run(self._core.get_memory(memory_id, recall))

    def list_memories(
        self,
        user_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        include_superseded: bool = False,
    ) -> MemoryPage:
        """One page of the user's memories, newest first."""
        return self._run(self._core.list_memories(user_id, limit, cursor, include_superseded))

    def iter_memories(
        self, user_id: str, *, page_size: int = 100, include_superseded: bool = False
    ) -> Iterator[Memory]:
        """Every memory of the user, newest first, fetching pages as it goes."""
        cursor: str | None = None
        while True:
            page = self.list_memories(
                user_id, limit=page_size, cursor=cursor, include_superseded=include_superseded
            )
            yield from page.memories
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def entity_graph(
        self, user_id: str, name: str, *, depth: int = 2, limit: int = 50
    ) -> EntityGraph:
        """The entity's neighbourhood in the user's concept graph (NotFoundError if unknown)."""
        return self._run(self._core.entity_graph(user_id, name, depth, limit))

    def record_procedure(
        self,
        user_id: str,
        query: str,
        tool_sequence: Sequence[str | Mapping[str, Any]],
        success: float,
        duration_ms: float,
    ) -> Procedure:
        """Count one run of a tool sequence for a query (success in [0, 1])."""
        return self._run(
            self._core.record_procedure(user_id, query, tool_sequence, success, duration_ms)
        )

    def suggest_procedure(
        self, user_id: str, query: str, *, min_confidence: float | None = None
    ) -> Suggestion | None:
        """The trusted tool sequence for a query like this one, or None."""
        return self._run(self._core.suggest_procedure(user_id, query, min_confidence))

    def forget_user(self, user_id: str) -> ForgetReport:
        """Erase the user from every layer; returns what was removed."""
        return self._run(self._core.forget_user(user_id))

    def stats(self) -> Stats:
        """Rows per layer for this key's tenant."""
        return self._run(self._core.stats())

    def health(self) -> Health:
        """Whether the API reaches its database and Redis (no retry on "degraded")."""
        return self._run(self._core.health())

    def extraction_status(self, user_id: str) -> ExtractionStatus:
        """How far extraction got with what was sent for the user (see `ExtractionStatus`)."""
        return self._run(self._core.extraction_status(user_id))

    def flush_extraction(self, user_id: str) -> ExtractionFlush:
        """Extract the user's scored, unclaimed turns now, however few (fewer than N would
        wait for the idle timeout). `wait_until_extracted` calls it when it is due."""
        return self._run(self._core.flush_extraction(user_id))

    def wait_until_extracted(
        self,
        user_id: str,
        *,
        timeout: float = 120.0,
        interval: float = 0.5,
        flush: bool = True,
    ) -> ExtractionStatus:
        """Poll until extraction has caught up with everything sent for the user (ingested,
        scored, claimed, stored); returns that status. With `flush`, once only leftovers
        below the N-turn trigger remain and nothing else is under way, flushes them (once per
        call) instead of waiting for the idle timeout: what an agent calls at the end of a
        conversation. Raises TimeoutError naming what is still pending."""
        return self._run(self._core.wait_until_extracted(user_id, timeout, interval, flush))

    def wait_until_indexed(
        self,
        user_id: str,
        *,
        query: str | None = None,
        external_ids: Sequence[str] | None = None,
        timeout: float = 30.0,
        interval: float = 0.2,
    ) -> list[SearchHit]:
        """Poll search until events just sent are searchable; returns the hits that show it.

        With `external_ids`: until, for every id, a search (turns included) returns a hit whose
        `source_turn_ids` contain it — a raw turn, or a memory extracted from it. The search
        is `query` when given, else the content this client sent for that turn (so the turns
        must have been sent by this client). With only `query`: until it has any hit.
        Raises TimeoutError naming what was still missing. Each poll is a real search, so it
        counts as an access to the hits, like any other search."""
        return self._run(
            self._core.wait_until_indexed(user_id, query, external_ids, timeout, interval)
        )


class AsyncEngramClient:
    """The same client for asyncio: every method is a coroutine (`iter_memories` is an
    async iterator). Construct and use it inside one event loop."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._core = _Core(retries=retries, backoff=backoff)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=_client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def _run(self, op: _Op[T]) -> T:
        outcome: _Outcome = None
        try:
            while True:
                step = op.send(outcome)
                if isinstance(step, _Sleep):
                    await asyncio.sleep(step.seconds)
                    outcome = None
                    continue
                request = self._http.build_request(
                    step.method,
                    step.path,
                    params=step.params,
                    content=step.content,
                    headers=_JSON if step.content is not None else None,
                )
                try:
                    outcome = await self._http.send(request)
                except httpx.TransportError as exc:
                    outcome = exc
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            op.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def send_events(self, events: Sequence[Mapping[str, Any]]) -> EventsAccepted:
        """See `EngramClient.send_events`."""
        return await self._run(self._core.send_events(events))

    async def add_turn(
        self,
        user_id: str,
        content: str,
        *,
        role: str = "user",
        external_id: str,
        channel: str = "default",
        timestamp: datetime | None = None,
        speaker: str | None = None,
    ) -> EventsAccepted:
        """See `EngramClient.add_turn`."""
        event = _Core.turn_event(
            user_id,
            content,
            role=role,
            external_id=external_id,
            channel=channel,
            timestamp=timestamp,
            speaker=speaker,
        )
        return await self.send_events([event])

    async def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        channel: str | None = None,
        tags: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        min_importance: float | None = None,
        include_superseded: bool = False,
        include_turns: bool | None = None,
        unit: Literal["turns", "memories"] | None = None,
    ) -> SearchResults:
        """See `EngramClient.search`."""
        return await self._run(
            self._core.search(
                user_id,
                query,
                unit=unit,
                limit=limit,
                channel=channel,
                tags=list(tags) if tags else None,
                kinds=list(kinds) if kinds else None,
                since=since,
                until=until,
                min_importance=min_importance,
                include_superseded=include_superseded,
                include_turns=include_turns,
            )
        )

    async def context(
        self,
        user_id: str,
        query: str,
        *,
        channel: str | None = None,
        token_budget: int | None = None,
    ) -> Context:
        """See `EngramClient.context`."""
        return await self._run(self._core.context(user_id, query, channel, token_budget))

    async def remember(
        self, user_id: str, memories: Sequence[Mapping[str, Any] | str]
    ) -> list[StoredMemory]:
        """See `EngramClient.remember`."""
        return await self._run(self._core.remember(user_id, memories))

    async def get_memory(self, memory_id: uuid.UUID | str, *, recall: int | None = None) -> Memory:
        """See `EngramClient.get_memory`."""
        return await self._run(self._core.get_memory(memory_id, recall))

    async def list_memories(
        self,
        user_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        include_superseded: bool = False,
    ) -> MemoryPage:
        """See `EngramClient.list_memories`."""
        return await self._run(self._core.list_memories(user_id, limit, cursor, include_superseded))

    async def iter_memories(
        self, user_id: str, *, page_size: int = 100, include_superseded: bool = False
    ) -> AsyncIterator[Memory]:
        """See `EngramClient.iter_memories` (use with `async for`)."""
        cursor: str | None = None
        while True:
            page = await self.list_memories(
                user_id, limit=page_size, cursor=cursor, include_superseded=include_superseded
            )
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def entity_graph(
        self, user_id: str, name: str, *, depth: int = 2, limit: int = 50
    ) -> EntityGraph:
        """See `EngramClient.entity_graph`."""
        return await self._run(self._core.entity_graph(user_id, name, depth, limit))

    async def record_procedure(
        self,
        user_id: str,
        query: str,
        tool_sequence: Sequence[str | Mapping[str, Any]],
        success: float,
        duration_ms: float,
    ) -> Procedure:
        """See `EngramClient.record_procedure`."""
        return await self._run(
            self._core.record_procedure(user_id, query, tool_sequence, success, duration_ms)
        )

    async def suggest_procedure(
        self, user_id: str, query: str, *, min_confidence: float | None = None
    ) -> Suggestion | None:
        """See `EngramClient.suggest_procedure`."""
        return await self._run(self._core.suggest_procedure(user_id, query, min_confidence))

    async def forget_user(self, user_id: str) -> ForgetReport:
        """See `EngramClient.forget_user`."""
        return await self._run(self._core.forget_user(user_id))

    async def stats(self) -> Stats:
        """See `EngramClient.stats`."""
        return await self._run(self._core.stats())

    async def health(self) -> Health:
        """See `EngramClient.health`."""
        return await self._run(self._core.health())

    async def extraction_status(self, user_id: str) -> ExtractionStatus:
        """See `EngramClient.extraction_status`."""
        return await self._run(self._core.extraction_status(user_id))

    async def flush_extraction(self, user_id: str) -> ExtractionFlush:
        """See `EngramClient.flush_extraction`."""
        return await self._run(self._core.flush_extraction(user_id))

    async def wait_until_extracted(
        self,
        user_id: str,
        *,
        timeout: float = 120.0,
        interval: float = 0.5,
        flush: bool = True,
    ) -> ExtractionStatus:
        """See `EngramClient.wait_until_extracted`."""
        return await self._run(self._core.wait_until_extracted(user_id, timeout, interval, flush))

    async def wait_until_indexed(
        self,
        user_id: str,
        *,
        query: str | None = None,
        external_ids: Sequence[str] | None = None,
        timeout: float = 30.0,
        interval: float = 0.2,
    ) -> list[SearchHit]:
        """See `EngramClient.wait_until_indexed`."""
        return await self._run(
            self._core.wait_until_indexed(user_id, query, external_ids, timeout, interval)
        )
