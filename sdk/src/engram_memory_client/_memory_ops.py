"""The clients' operations on stored memories: reading, editing, history, the tenant's
knowledge and procedures (see _core for how an operation runs)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from engram_memory_client._args import items_of, segment
from engram_memory_client._transport import Transport
from engram_memory_client._wire import Op
from engram_memory_client.models import (
    EntityGraph,
    KnowledgeDeleted,
    Memory,
    MemoryDeleted,
    MemoryEdited,
    MemoryHistory,
    MemoryPage,
    Procedure,
    RelatedMemories,
    RelatedMemory,
    SessionCleared,
    StoredMemories,
    StoredMemory,
    Suggestion,
    SuggestionReply,
)


class MemoryOps(Transport):
    """Reading and editing what is stored, as operations."""

    # -- reading ------------------------------------------------------------------------------

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
