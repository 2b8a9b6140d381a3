"""The asyncio client: `AsyncEngramClient`, the same methods as coroutines.

    async with AsyncEngramClient("http://127.0.0.1:8080", api_key) as engram:
        hits = (await engram.search("alice", "where does Alice live?")).hits

Each method runs one operation of `_core.Core` with `httpx.AsyncClient` and `asyncio.sleep`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
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

__all__ = ["AsyncEngramClient"]


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
        check_client_args(base_url, api_key)
        self._core = Core(retries=retries, backoff=backoff)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def _run(self, op: Op[T]) -> T:
        outcome: Outcome = None
        try:
            while True:
                step = op.send(outcome)
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
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
        agent_id: str | None = None,
    ) -> EventsAccepted:
        """See `EngramClient.add_turn`."""
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
        agent_id: str | None = None,
        include_knowledge: bool = False,
        record: bool = True,
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
                agent_id=agent_id,
                include_knowledge=include_knowledge or None,
                record=None if record else False,
            )
        )

    async def context(
        self,
        user_id: str,
        query: str,
        *,
        channel: str | None = None,
        token_budget: int | None = None,
        agent_id: str | None = None,
        include_knowledge: bool = False,
    ) -> Context:
        """See `EngramClient.context`."""
        return await self._run(
            self._core.context(
                user_id,
                query,
                channel,
                token_budget,
                agent_id=agent_id,
                include_knowledge=include_knowledge,
            )
        )

    async def remember(
        self,
        user_id: str,
        memories: Sequence[Mapping[str, Any] | str],
        *,
        agent_id: str | None = None,
        shared: bool = False,
    ) -> list[StoredMemory]:
        """See `EngramClient.remember`."""
        return await self._run(
            self._core.remember(user_id, memories, agent_id=agent_id, shared=shared)
        )

    async def get_memory(
        self, memory_id: uuid.UUID | str, *, recall: int | None = None, agent_id: str | None = None
    ) -> Memory:
        """See `EngramClient.get_memory`."""
        return await self._run(self._core.get_memory(memory_id, recall, agent_id=agent_id))

    async def list_memories(
        self,
        user_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        include_superseded: bool = False,
        agent_id: str | None = None,
    ) -> MemoryPage:
        """See `EngramClient.list_memories`."""
        return await self._run(
            self._core.list_memories(user_id, limit, cursor, include_superseded, agent_id=agent_id)
        )

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
        self,
        user_id: str,
        name: str,
        *,
        depth: int = 2,
        limit: int = 50,
        agent_id: str | None = None,
    ) -> EntityGraph:
        """See `EngramClient.entity_graph`."""
        return await self._run(
            self._core.entity_graph(user_id, name, depth, limit, agent_id=agent_id)
        )

    async def add_knowledge(
        self, memories: Sequence[Mapping[str, Any] | str]
    ) -> list[StoredMemory]:
        """Store facts of the tenant (docs, policies): no one user's, searched by any user
        with `include_knowledge=True`."""
        return await self._run(self._core.add_knowledge(memories))

    async def list_knowledge(self, *, limit: int = 50, cursor: str | None = None) -> MemoryPage:
        """One page of the tenant's knowledge, newest first."""
        return await self._run(self._core.list_knowledge(limit, cursor))

    async def delete_knowledge(self, memory_id: uuid.UUID | str) -> KnowledgeDeleted:
        """Delete one fact of the tenant's knowledge (NotFoundError if it is not one)."""
        return await self._run(self._core.delete_knowledge(memory_id))

    async def update_memory(
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
        """See `EngramClient.update_memory`."""
        return await self._run(
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

    async def delete_memory(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        with_trace: bool = False,
        agent_id: str | None = None,
    ) -> MemoryDeleted:
        """See `EngramClient.delete_memory`."""
        return await self._run(
            self._core.delete_memory(memory_id, user_id, with_trace, agent_id=agent_id)
        )

    async def memory_history(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> MemoryHistory:
        """See `EngramClient.memory_history`."""
        return await self._run(self._core.memory_history(memory_id, user_id, agent_id=agent_id))

    async def related_memories(
        self,
        memory_id: uuid.UUID | str,
        *,
        user_id: str | None = None,
        limit: int = 10,
        agent_id: str | None = None,
    ) -> list[RelatedMemory]:
        """See `EngramClient.related_memories`."""
        return await self._run(
            self._core.related_memories(memory_id, user_id, limit, agent_id=agent_id)
        )

    async def clear_session(self, user_id: str, session_id: uuid.UUID | str) -> SessionCleared:
        """See `EngramClient.clear_session`."""
        return await self._run(self._core.clear_session(user_id, session_id))

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
