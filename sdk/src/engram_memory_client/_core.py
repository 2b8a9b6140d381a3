"""Every operation of the clients, written once.

An operation is a generator that yields what to do next (send a request, or sleep) and is sent
what happened (the response, or the transport error). The blocking client drives it with
`httpx.Client` and `time.sleep`, the asyncio one with `httpx.AsyncClient` and `asyncio.sleep`:
request building, retries, polling and reply parsing never exist twice.

Retries: connection errors, timeouts, 5xx answers and 429 (over the tenant's event rate)
are retried with exponential backoff (jittered; a `Retry-After` header is honoured up to
`MAX_RETRY_AFTER_S`); any other 4xx answer is never retried, since repeating the same request
cannot change it.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import httpx

from engram_memory_client._args import check_wait, items_of, segment, url_part
from engram_memory_client._wire import (
    MAX_BACKOFF_S,
    MAX_RETRY_AFTER_S,
    M,
    Op,
    Outcome,
    Send,
    Sleep,
    jsonable,
    read_reply,
    retry_after,
)
from engram_memory_client.errors import UnavailableError, error_from_response
from engram_memory_client.models import (
    Context,
    EntityGraph,
    EventsAccepted,
    ExtractionFlush,
    ExtractionStatus,
    ForgetReport,
    Health,
    KnowledgeDeleted,
    Memory,
    MemoryDeleted,
    MemoryEdited,
    MemoryHistory,
    MemoryPage,
    Procedure,
    RelatedMemories,
    RelatedMemory,
    SearchHit,
    SearchResults,
    SessionCleared,
    Stats,
    StoredMemories,
    StoredMemory,
    Suggestion,
    SuggestionReply,
)

SENT_TURNS_KEPT = 10_000  # turns remembered for `wait_until_indexed` (oldest forgotten first)


class Core:
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
        into: type[M],
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotent: bool = True,
        answers: frozenset[int] = frozenset(),
    ) -> Op[M]:
        """Send with retries and return the reply as `into`, or raise a typed error.

        A request that is not idempotent is retried only when it surely did not reach the
        server (connect errors) or the server answered 5xx (it rolled its transaction back);
        a read timeout might hide a success, and repeating it could count it twice.
        `answers` are non-2xx statuses that are results, not errors (no retry either)."""
        query = {k: jsonable(v) for k, v in (params or {}).items() if v is not None}
        for name, value in query.items():
            url_part(value, name)
        content = None if body is None else json.dumps(jsonable(body)).encode()
        step = Send(method, path, query or None, content)
        attempt = 0
        while True:
            outcome = yield step
            if isinstance(outcome, httpx.Response) and (
                outcome.is_success or outcome.status_code in answers
            ):
                return read_reply(outcome, into)
            delay = self._retry_delay(outcome, attempt, idempotent)
            if delay is None or attempt >= self.retries:
                break
            attempt += 1
            yield Sleep(delay)
        if isinstance(outcome, httpx.Response):
            raise error_from_response(outcome)
        cause = f"{type(outcome).__name__}: {outcome}"
        if isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout):
            raise UnavailableError(None, f"could not reach the Engram API ({cause})") from outcome
        # The request may have reached the server: say so, a caller must not assume it failed.
        maybe = "" if idempotent else "; it may have been carried out, check before repeating it"
        raise UnavailableError(None, f"no answer from the Engram API ({cause}){maybe}") from outcome

    def _retry_delay(self, outcome: Outcome, attempt: int, idempotent: bool) -> float | None:
        """Seconds to wait before the next attempt, or None when retrying cannot help."""
        wait = min(self.backoff * 2**attempt, MAX_BACKOFF_S) * random.uniform(0.5, 1.0)
        if isinstance(outcome, httpx.TransportError):
            safe = isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout)
            return wait if idempotent or safe else None
        # 429: the server did nothing and says when to come back.
        if isinstance(outcome, httpx.Response) and (
            outcome.status_code >= 500 or outcome.status_code == 429
        ):
            asked = retry_after(outcome.headers.get("Retry-After"))
            if asked is not None:
                wait = max(wait, min(asked, MAX_RETRY_AFTER_S))
            return wait
        return None  # any other 4xx: the same request gets the same answer

    # -- capture ------------------------------------------------------------------------------

    def send_events(self, events: Sequence[Mapping[str, Any]]) -> Op[EventsAccepted]:
        # Retrying POST /v1/events is safe: the server derives each event's id from its
        # external_id (or, without one, from its content) and ingestion skips ids it already
        # has. For the content-derived ids to match across retries, every event gets its
        # timestamp here, once, instead of the server stamping each attempt with its own clock.
        now = datetime.now(timezone.utc)
        batch = [{**e, "timestamp": now} if e.get("timestamp") is None else dict(e) for e in events]
        accepted = yield from self.call(
            "POST", "/v1/events", EventsAccepted, body={"events": batch}
        )
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
        agent_id: str | None = None,
    ) -> dict[str, Any]:
        """The event of one conversation turn, as `add_turn` sends it."""
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
        if agent_id is not None:
            event["agent_id"] = agent_id
        return event

    # -- recall -------------------------------------------------------------------------------

    def search(self, user_id: str, query: str, **options: Any) -> Op[SearchResults]:
        body = {"user_id": user_id, "query": query}
        body.update({k: v for k, v in options.items() if v is not None})
        return (yield from self.call("POST", "/v1/search", SearchResults, body=body))

    def context(
        self,
        user_id: str,
        query: str,
        channel: str | None,
        token_budget: int | None,
        *,
        agent_id: str | None = None,
        include_knowledge: bool = False,
    ) -> Op[Context]:
        body = {
            "user_id": user_id,
            "query": query,
            "channel": channel,
            "token_budget": token_budget,
            "agent_id": agent_id,
            "include_knowledge": include_knowledge or None,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return (yield from self.call("POST", "/v1/context", Context, body=body))

    def remember(
        self,
        user_id: str,
        memories: Sequence[Mapping[str, Any] | str],
        *,
        agent_id: str | None = None,
        shared: bool = False,
    ) -> Op[list[StoredMemory]]:
        # Retried like a read: a repeat of a stored memory is folded into it ("reinforced"),
        # it never adds a second row.
        items = items_of(memories, "memories")
        body: dict[str, Any] = {"user_id": user_id, "memories": items}
        if agent_id is not None:
            body.update(agent_id=agent_id, shared=shared)
        stored = yield from self.call("POST", "/v1/memories", StoredMemories, body=body)
        return stored.memories

    def get_memory(
        self, memory_id: uuid.UUID | str, recall: int | None, *, agent_id: str | None = None
    ) -> Op[Memory]:
        path = f"/v1/memories/{segment(memory_id, 'memory_id')}"
        params = {"recall": recall, "agent_id": agent_id}
        return (yield from self.call("GET", path, Memory, params=params))

    def list_memories(
        self,
        user_id: str,
        limit: int,
        cursor: str | None,
        include_superseded: bool,
        *,
        agent_id: str | None = None,
    ) -> Op[MemoryPage]:
        params = {
            "user_id": user_id,
            "limit": limit,
            "cursor": cursor,
            "include_superseded": "true" if include_superseded else None,
            "agent_id": agent_id,
        }
        return (yield from self.call("GET", "/v1/memories", MemoryPage, params=params))

    def entity_graph(
        self, user_id: str, name: str, depth: int, limit: int, *, agent_id: str | None = None
    ) -> Op[EntityGraph]:
        path = f"/v1/entities/{segment(name, 'name')}/graph"
        params = {"user_id": user_id, "depth": depth, "limit": limit, "agent_id": agent_id}
        return (yield from self.call("GET", path, EntityGraph, params=params))

    # -- knowledge (the tenant's facts, no one user's) ----------------------------------------

    def add_knowledge(self, memories: Sequence[Mapping[str, Any] | str]) -> Op[list[StoredMemory]]:
        body = {"memories": items_of(memories, "memories")}
        stored = yield from self.call("POST", "/v1/knowledge", StoredMemories, body=body)
        return stored.memories

    def list_knowledge(self, limit: int, cursor: str | None) -> Op[MemoryPage]:
        params = {"limit": limit, "cursor": cursor}
        return (yield from self.call("GET", "/v1/knowledge", MemoryPage, params=params))

    def delete_knowledge(self, memory_id: uuid.UUID | str) -> Op[KnowledgeDeleted]:
        path = f"/v1/knowledge/{segment(memory_id, 'memory_id')}"
        return (yield from self.call("DELETE", path, KnowledgeDeleted, idempotent=False))

    # -- editing and history ------------------------------------------------------------------

    def update_memory(
        self, memory_id: uuid.UUID | str, content: str, **fields: Any
    ) -> Op[MemoryEdited]:
        # Retried like a read: the same edit sent again answers "unchanged" (see the route).
        body = {"content": content, **{k: v for k, v in fields.items() if v is not None}}
        path = f"/v1/memories/{segment(memory_id, 'memory_id')}"
        return (yield from self.call("PATCH", path, MemoryEdited, body=body))

    def delete_memory(
        self,
        memory_id: uuid.UUID | str,
        user_id: str | None,
        with_trace: bool,
        *,
        agent_id: str | None = None,
    ) -> Op[MemoryDeleted]:
        path = f"/v1/memories/{segment(memory_id, 'memory_id')}"
        params = {
            "user_id": user_id,
            "with_trace": "true" if with_trace else None,
            "agent_id": agent_id,
        }
        # Not retried after a lost answer: a repeat of a delete that went through is a 404,
        # which would tell the caller the memory never existed.
        op = self.call("DELETE", path, MemoryDeleted, params=params, idempotent=False)
        return (yield from op)

    def memory_history(
        self, memory_id: uuid.UUID | str, user_id: str | None, *, agent_id: str | None = None
    ) -> Op[MemoryHistory]:
        path = f"/v1/memories/{segment(memory_id, 'memory_id')}/history"
        params = {"user_id": user_id, "agent_id": agent_id}
        return (yield from self.call("GET", path, MemoryHistory, params=params))

    def related_memories(
        self,
        memory_id: uuid.UUID | str,
        user_id: str | None,
        limit: int,
        *,
        agent_id: str | None = None,
    ) -> Op[list[RelatedMemory]]:
        path = f"/v1/memories/{segment(memory_id, 'memory_id')}/related"
        params = {"user_id": user_id, "limit": limit, "agent_id": agent_id}
        reply = yield from self.call("GET", path, RelatedMemories, params=params)
        return reply.related

    def clear_session(self, user_id: str, session_id: uuid.UUID | str) -> Op[SessionCleared]:
        user, session = segment(user_id, "user_id"), segment(session_id, "session_id")
        path = f"/v1/users/{user}/sessions/{session}"
        # Not retried after a lost answer, as delete_memory (a repeat would be a 404).
        return (yield from self.call("DELETE", path, SessionCleared, idempotent=False))

    # -- procedures ---------------------------------------------------------------------------

    def record_procedure(
        self,
        user_id: str,
        query: str,
        tool_sequence: Sequence[str | Mapping[str, Any]],
        success: float,
        duration_ms: float,
    ) -> Op[Procedure]:
        body = {
            "user_id": user_id,
            "query": query,
            "tool_sequence": list(tool_sequence),
            "success": float(success),
            "duration_ms": float(duration_ms),
        }
        # Not idempotent: each call counts one more run of the sequence.
        return (
            yield from self.call("POST", "/v1/procedures", Procedure, body=body, idempotent=False)
        )

    def suggest_procedure(
        self, user_id: str, query: str, min_confidence: float | None
    ) -> Op[Suggestion | None]:
        params = {"user_id": user_id, "query": query, "min_confidence": min_confidence}
        reply = yield from self.call(
            "GET", "/v1/procedures/suggest", SuggestionReply, params=params
        )
        return reply.suggestion

    # -- users and operations -----------------------------------------------------------------

    def forget_user(self, user_id: str) -> Op[ForgetReport]:
        path = f"/v1/users/{segment(user_id, 'user_id')}"
        report = yield from self.call("DELETE", path, ForgetReport)
        with self._lock:
            for key in [k for k in self._sent if k[0] == user_id]:
                del self._sent[key]
        return report

    def stats(self) -> Op[Stats]:
        return (yield from self.call("GET", "/v1/stats", Stats))

    def health(self) -> Op[Health]:
        # 503 is the answer "degraded" (with the failing checks), not a reason to retry.
        return (yield from self.call("GET", "/healthz", Health, answers=frozenset({503})))

    def extraction_status(self, user_id: str) -> Op[ExtractionStatus]:
        path = f"/v1/users/{segment(user_id, 'user_id')}/extraction"
        return (yield from self.call("GET", path, ExtractionStatus))

    def flush_extraction(self, user_id: str) -> Op[ExtractionFlush]:
        # Retried like a read: a repeat claims only what the first left unclaimed.
        path = f"/v1/users/{segment(user_id, 'user_id')}/extraction/flush"
        return (yield from self.call("POST", path, ExtractionFlush))

    # -- waiting ------------------------------------------------------------------------------

    def wait_until_extracted(
        self, user_id: str, timeout: float, interval: float, flush: bool
    ) -> Op[ExtractionStatus]:
        """Poll the extraction status until caught up; see the clients' docstrings."""
        check_wait(timeout, interval)
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
            yield Sleep(interval)

    def wait_until_indexed(
        self,
        user_id: str,
        query: str | None,
        external_ids: Sequence[str] | None,
        timeout: float,
        interval: float,
    ) -> Op[list[SearchHit]]:
        """Poll search until what was sent is findable; see the clients' docstrings."""
        check_wait(timeout, interval)
        searches = self._indexed_searches(user_id, query, external_ids)
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
            yield Sleep(interval)

    def _indexed_searches(
        self, user_id: str, query: str | None, external_ids: Sequence[str] | None
    ) -> dict[str, list[str]]:
        """The searches `wait_until_indexed` runs: query text -> external ids it must find."""
        wanted = list(dict.fromkeys(external_ids or []))
        if not wanted and not query:
            raise ValueError("give a query, external_ids, or both")
        if query:
            return {query: wanted}
        with self._lock:
            known = {e: self._sent.get((user_id, e)) for e in wanted}
        unknown = [e for e, content in known.items() if content is None]
        if unknown:
            raise ValueError(
                f"no query given and this client did not send turns {unknown} for "
                f"user {user_id!r}: pass the query to search for"
            )
        searches: dict[str, list[str]] = {}
        for external_id, content in known.items():
            searches.setdefault(str(content), []).append(external_id)
        return searches
