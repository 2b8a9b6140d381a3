"""The MCP tools that change or trace one memory or one session: edit with history, delete,
read the history, find related memories, clear a session. Each is a call of the SDK through
the same key and error handling as the other tools (app/mcp/tools.py).

A refused call is a tool error naming the argument at fault: `memory_id: not found` for an
unknown id (another tenant's, or another agent's private memory, included), `session_id: not
found` for a session, `invalid content: …` for what the API refused.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from engram_memory_client import (
    MemoryDeleted,
    MemoryEdited,
    MemoryHistory,
    RelatedMemory,
    SessionCleared,
)
from mcp.server.fastmcp import Context as McpContext
from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from app.mcp.inputs import (
    AgentId,
    MemoryId,
    MemoryKind,
    MemoryOwner,
    SessionId,
    UserId,
)
from app.mcp.tools import EngramTools


class EditTools:
    """The editing tools, acting through the main tools' client and key (stdio or HTTP)."""

    def __init__(self, tools: EngramTools) -> None:
        self._tools = tools

    async def update_memory(
        self,
        memory_id: MemoryId,
        content: Annotated[str, Field(description="the memory's new wording, in full")],
        ctx: McpContext,
        user_id: MemoryOwner = None,
        kind: Annotated[MemoryKind | None, Field(description="a new kind (default: kept)")] = None,
        importance: Annotated[
            float | None, Field(description="a new importance, 0 to 1 (default: kept)")
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description="replaces the memory's metadata (default: kept)"),
        ] = None,
        agent_id: AgentId = None,
    ) -> MemoryEdited:
        """Correct a memory: the new content becomes its current version (searchable at once)
        and the old one stays in its history. Sending the same edit again changes nothing
        (status `unchanged`); editing a version that was already replaced is refused with the
        id of the current one."""
        return await self._tools._call(
            ctx,
            lambda c: c.update_memory(
                memory_id,
                content,
                user_id=user_id,
                kind=kind,
                importance=importance,
                metadata=metadata,
                agent_id=agent_id,
            ),
            not_found="memory_id",
        )

    async def delete_memory(
        self,
        memory_id: MemoryId,
        ctx: McpContext,
        user_id: MemoryOwner = None,
        with_trace: Annotated[
            bool,
            Field(description="also delete the conversation turns no other memory cites"),
        ] = False,
        agent_id: AgentId = None,
    ) -> MemoryDeleted:
        """Delete a memory and every version of it from every layer (irreversible). Its source
        turns stay unless with_trace."""
        return await self._tools._call(
            ctx,
            lambda c: c.delete_memory(
                memory_id, user_id=user_id, with_trace=with_trace, agent_id=agent_id
            ),
            not_found="memory_id",
        )

    async def memory_history(
        self,
        memory_id: MemoryId,
        ctx: McpContext,
        user_id: MemoryOwner = None,
        agent_id: AgentId = None,
    ) -> MemoryHistory:
        """Every version of a memory, oldest first, from the id of any of them; `current_id`
        is the version in force."""
        return await self._tools._call(
            ctx,
            lambda c: c.memory_history(memory_id, user_id=user_id, agent_id=agent_id),
            not_found="memory_id",
        )

    async def related_memories(
        self,
        memory_id: MemoryId,
        ctx: McpContext,
        user_id: MemoryOwner = None,
        limit: Annotated[int, Field(description="at most this many (1-100)")] = 10,
        agent_id: AgentId = None,
    ) -> list[RelatedMemory]:
        """Current memories linked to this one, strongest first: recalled together before
        (association weight) or naming the same people, places and things."""
        return await self._tools._call(
            ctx,
            lambda c: c.related_memories(
                memory_id, user_id=user_id, limit=limit, agent_id=agent_id
            ),
            not_found="memory_id",
        )

    async def clear_session(
        self, user_id: UserId, session_id: SessionId, ctx: McpContext
    ) -> SessionCleared:
        """Clear one conversation session of the user (irreversible): its turns, the memories
        only it supports (every agent's), its turns in working memory. Memories that other
        sessions support too are kept, citing only those."""
        return await self._tools._call(
            ctx, lambda c: c.clear_session(user_id, session_id), not_found="session_id"
        )


_READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
_EDIT = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)
_ERASE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)


def register_edit_tools(server: FastMCP, tools: EngramTools) -> None:
    """Add the editing tools to the server, with hints saying which ones read, edit or erase."""
    edits = EditTools(tools)
    for fn, hints in (
        (edits.update_memory, _EDIT),
        (edits.delete_memory, _ERASE),
        (edits.memory_history, _READ),
        (edits.related_memories, _READ),
        (edits.clear_session, _ERASE),
    ):
        server.add_tool(
            fn,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=hints,
            structured_output=True,
        )
