"""The blocking client: `EngramClient`.

    with EngramClient("http://127.0.0.1:8080", api_key) as engram:
        engram.add_turn("alice", "I moved to Lisbon", external_id="msg-1")
        engram.remember("alice", ["Alice prefers PostgreSQL"])
        hits = engram.search("alice", "where does Alice live?").hits

Each method runs one operation of `_core.Core` with `httpx.Client` and `time.sleep`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

import httpx

from engram_memory_client._core import Core
from engram_memory_client._wire import (
    JSON_CONTENT,
    Op,
    Outcome,
    Sleep,
    T,
    check_client_args,
    client_headers,
)
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
    RelatedMemory,
    SearchHit,
    SearchResults,
    SessionCleared,
    Stats,
    StoredMemory,
    Suggestion,
)

__all__ = ["EngramClient"]


class EngramClient:
    """Blocking client. One instance per API key; safe to share between threads.

    `retries` is the number of extra attempts after a connection error, a timeout, a 5xx or
    a 429 answer; `backoff` the first pause (doubling each time); `transport` an optional httpx
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
        check_client_args(base_url, api_key)
        self._core = Core(retries=retries, backoff=backoff)
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    def _run(self, op: Op[T]) -> T:
        outcome: Outcome = None
        try:
            while True:
                step = op.send(outcome)
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    outcome = None
                    continue
                request = self._http.build_request(
                    step.method,
                    step.path,
                    params=step.params,
                    content=step.content,
                    headers=JSON_CONTENT if step.content is not None else None,
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
        agent_id: str | None = None,
    ) -> EventsAccepted:
        """Queue one conversation turn; `external_id` is your message id (makes it idempotent)."""
        event = Core.turn_event(
            user_id,
            content,
            role=role,
            external_id=external_id,
            channel=channel,
            timestamp=timestamp,
            speaker=speaker,
            agent_id=agent_id,
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
        agent_id: str | None = None,
        include_knowledge: bool = False,
        record: bool = True,
    ) -> SearchResults:
        """Hybrid search: the user's source turns with their memories attached (or memories,
        with `unit="memories"`). `record=False` looks without counting as the user's
        retrieval (no access count, decay clock or Hebbian change)."""
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
                agent_id=agent_id,
                include_knowledge=include_knowledge or None,
                record=None if record else False,
            )
        )

    def context(
        self,
        user_id: str,
        query: str,
        *,
        channel: str | None = None,
        token_budget: int | None = None,
        agent_id: str | None = None,
        include_knowledge: bool = False,
    ) -> Context:
        """The context block for the next answer, packed into the token budget."""
        return self._run(
            self._core.context(
                user_id,
                query,
                channel,
                token_budget,
                agent_id=agent_id,
                include_knowledge=include_knowledge,
            )
        )

    def remember(
        self,
        user_id: str,
        memories: Sequence[Mapping[str, Any] | str],
        *,
        agent_id: str | None = None,
        shared: bool = False,
    ) -> list[StoredMemory]:
        """Store explicit memories (a string is `{"content": it}`); results in request order."""
        return self._run(self._core.remember(user_id, memories, agent_id=agent_id, shared=shared))

    def get_memory(
        self, memory_id: uuid.UUID | str, *, recall: int | None = None, agent_id: str | None = None
    ) -> Memory:
        """One memory; with `recall=N`, its source turns and N turns around them."""
        return self._run(self._core.get_memory(memory_id, recall, agent_id=agent_id))

    def list_memories(
        self,
        user_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        include_superseded: bool = False,
        agent_id: str | None = None,
    ) -> MemoryPage:
        """One page of the user's memories, newest first."""
        return self._run(
            self._core.list_memories(user_id, limit, cursor, include_superseded, agent_id=agent_id)
        )

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
        self,
        user_id: str,
        name: str,
        *,
        depth: int = 2,
        limit: int = 50,
        agent_id: str | None = None,
    ) -> EntityGraph:
        """The entity's neighbourhood in the user's concept graph (NotFoundError if unknown)."""
        return self._run(self._core.entity_graph(user_id, name, depth, limit, agent_id=agent_id))

    def add_knowledge(self, memories: Sequence[Mapping[str, Any] | str]) -> list[StoredMemory]:
        """Store facts of the tenant (docs, policies): no one user's, searched by any user
        with `include_knowledge=True`."""
        return self._run(self._core.add_knowledge(memories))

    def list_knowledge(self, *, limit: int = 50, cursor: str | None = None) -> MemoryPage:
        """One page of the tenant's knowledge, newest first."""
        return self._run(self._core.list_knowledge(limit, cursor))

    def delete_knowledge(self, memory_id: uuid.UUID | str) -> KnowledgeDeleted:
        """Delete one fact of the tenant's knowledge (NotFoundError if it is not one)."""
        return self._run(self._core.delete_knowledge(memory_id))

    def update_memory(
        self,
        memory_id: uuid.UUID | str,
        content: str,
        *,
        user_id: str | None = None,
        kind: str | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
    ) -> MemoryEdited:
        """Edit a memory: the content becomes its new version, the old one stays in its
        history. Sending the same edit again writes nothing (`status == "unchanged"`); editing
        a replaced version raises ConflictError naming the current one (`current_id`)."""
        return self._run(
            self._core.update_memory(
                memory_id,
                content,
                user_id=user_id,
                kind=kind,
                importance=importance,
                metadata=dict(metadata) if metadata is not None else None,
                agent_id=agent_id,
            )
        )

    def delete_memory(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        with_trace: bool = False,
        agent_id: str | None = None,
    ) -> MemoryDeleted:
        """Delete a memory and every version of it from every layer; with `with_trace`, also
        the source turns no other memory cites."""
        return self._run(
            self._core.delete_memory(memory_id, user_id, with_trace, agent_id=agent_id)
        )

    def memory_history(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> MemoryHistory:
        """Every version of the memory, oldest first (from any version's id)."""
        return self._run(self._core.memory_history(memory_id, user_id, agent_id=agent_id))

    def related_memories(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        limit: int = 10,
        agent_id: str | None = None,
    ) -> list[RelatedMemory]:
        """Memories associated with this one or sharing its entities, strongest first."""
        return self._run(self._core.related_memories(memory_id, user_id, limit, agent_id=agent_id))

    def clear_session(self, user_id: str, session_id: uuid.UUID | str) -> SessionCleared:
        """Clear a session: its turns, the memories only it supports, its turns in working
        memory. Session ids come with search hits, memories and recalled turns."""
        return self._run(self._core.clear_session(user_id, session_id))

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
