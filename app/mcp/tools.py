"""The MCP tools: one per thing an agent does with its memory, each a call of the SDK.

Arguments are typed and described (app/mcp/inputs.py), so an MCP client sees a JSON schema;
FastMCP validates them (a missing or mistyped argument is a tool error naming it) before the
REST API validates them again with its own limits. Answers are the SDK's typed models, sent as
structured content. A refused call is a tool error (`isError`) naming the argument at fault.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from engram_memory_client import (
    AsyncEngramClient,
    Context,
    EngramError,
    EntityGraph,
    EventsAccepted,
    ForgetReport,
    Memory,
    MemoryPage,
    Procedure,
    SearchResults,
    Stats,
    StoredMemory,
    Suggestion,
)
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.fastmcp import Context as McpContext
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from app.mcp.clients import ClientPool, tool_error
from app.mcp.inputs import (
    AgentId,
    Channel,
    Knowledge,
    MemoryId,
    MemoryIn,
    MemoryKind,
    Query,
    TurnIn,
    UserId,
)

T = TypeVar("T")


def _turn_field(field: str) -> str:
    """The REST API names turns `events[i]`; the tool calls them `turns[i]`, and takes the
    user and channel once for all of them."""
    if field == "events":
        return "turns"
    head, _, tail = field.partition("].")
    if head.startswith("events[") and tail in ("user_id", "channel", "agent_id"):
        return tail
    return field.replace("events[", "turns[", 1)


class EngramTools:
    """Every tool, bound to a pool of SDK clients and (stdio only) the key to use."""

    def __init__(self, pool: ClientPool, default_key: str | None) -> None:
        self._pool = pool
        self._default_key = default_key

    async def _client(self, ctx: McpContext) -> AsyncEngramClient:
        """The client for this call's key: the caller's bearer key over HTTP, else the
        server's own (stdio). An HTTP request never falls back to the server's key."""
        request = ctx.request_context.request
        key = self._default_key
        if request is not None:
            user = request.scope.get("user")
            key = user.access_token.token if isinstance(user, AuthenticatedUser) else None
        if not key:
            raise ToolError("no API key: send Authorization: Bearer <Engram API key>")
        try:
            return await self._pool.client(key)
        except ValueError as exc:  # a key no request can carry (the SDK says why)
            raise ToolError(f"API key refused: {exc}") from None

    async def _call(
        self,
        ctx: McpContext,
        op: Callable[[AsyncEngramClient], Awaitable[T]],
        *,
        not_found: str | None = None,
        rename: Callable[[str], str] | None = None,
    ) -> T:
        client = await self._client(ctx)
        try:
            return await op(client)
        except EngramError as exc:
            raise tool_error(exc, not_found=not_found, rename=rename) from None

    async def record_turns(
        self,
        user_id: UserId,
        turns: Annotated[list[TurnIn], Field(description="the messages, oldest first")],
        ctx: McpContext,
        channel: Annotated[str, Field(description="where the conversation happens")] = "default",
        agent_id: AgentId = None,
    ) -> EventsAccepted:
        """Record conversation turns into the user's memory. Queued, not yet searchable:
        workers store each turn within moments and extract memories from them later."""
        events = [
            {
                **turn.model_dump(exclude_none=True),
                "type": "turn",
                "user_id": user_id,
                "channel": channel,
                **({"agent_id": agent_id} if agent_id else {}),
            }
            for turn in turns
        ]
        return await self._call(ctx, lambda c: c.send_events(events), rename=_turn_field)

    async def record_events(
        self,
        events: Annotated[
            list[dict[str, Any]],
            Field(
                description="events, each an object with `type` (turn, typing_start, "
                "channel_switch, iot_trigger, presence_change, tool_run, or your own) and "
                "`user_id`, plus that type's fields; unknown types are kept as raw events"
            ),
        ],
        ctx: McpContext,
    ) -> EventsAccepted:
        """Record events of any type (a tool run, a channel switch, a sensor trigger …).
        One invalid event refuses the whole batch, naming its field as events[i].field."""
        return await self._call(ctx, lambda c: c.send_events(events))

    async def remember(
        self,
        user_id: UserId,
        memories: Annotated[list[MemoryIn], Field(description="the memories to store")],
        ctx: McpContext,
        agent_id: AgentId = None,
        shared: Annotated[
            bool, Field(description="with agent_id: visible to every agent of the user")
        ] = False,
    ) -> list[StoredMemory]:
        """Store explicit memories now (searchable at once). A repeat of a memory the user
        already has reinforces it (status `reinforced`) instead of adding a copy."""
        items = [m.model_dump(mode="json", exclude_none=True) for m in memories]
        return await self._call(
            ctx, lambda c: c.remember(user_id, items, agent_id=agent_id, shared=shared)
        )

    async def search(
        self,
        user_id: UserId,
        query: Query,
        ctx: McpContext,
        limit: Annotated[int, Field(description="at most this many hits (1-100)")] = 10,
        unit: Annotated[
            Literal["turns", "memories"] | None,
            Field(description="rank source turns with their memories attached, or memories"),
        ] = None,
        channel: Channel = None,
        tags: Annotated[list[str] | None, Field(description="memories with any of these")] = None,
        kinds: Annotated[list[MemoryKind] | None, Field(description="only these kinds")] = None,
        since: Annotated[datetime | None, Field(description="not before (ISO 8601)")] = None,
        until: Annotated[datetime | None, Field(description="not after (ISO 8601)")] = None,
        min_importance: Annotated[
            float | None, Field(description="memories at least this important (0-1)")
        ] = None,
        include_superseded: Annotated[
            bool, Field(description="also memories a later one replaced")
        ] = False,
        agent_id: AgentId = None,
        include_knowledge: Knowledge = False,
    ) -> SearchResults:
        """Hybrid search (words, meaning, time) over what the user said and the memories
        made from it. Each hit points back at its source turns (see get_memory for recall)."""
        return await self._call(
            ctx,
            lambda c: c.search(
                user_id,
                query,
                limit=limit,
                unit=unit,
                channel=channel,
                tags=tags,
                kinds=kinds,
                since=since,
                until=until,
                min_importance=min_importance,
                include_superseded=include_superseded,
                agent_id=agent_id,
                include_knowledge=include_knowledge,
            ),
        )

    async def assemble_context(
        self,
        user_id: UserId,
        query: Query,
        ctx: McpContext,
        channel: Channel = None,
        token_budget: Annotated[
            int | None, Field(description="tokens the block may use (50-200000)")
        ] = None,
        agent_id: AgentId = None,
        include_knowledge: Knowledge = False,
    ) -> Annotated[CallToolResult, Context]:
        """The context block for the next answer: recent turns, the most relevant memories,
        related facts and a trusted procedure, packed into the token budget. The text content
        is the block itself, ready to place in the model's context; the structured content
        is the whole answer (tokens, parts, warnings)."""
        block = await self._call(
            ctx,
            lambda c: c.context(
                user_id,
                query,
                channel=channel,
                token_budget=token_budget,
                agent_id=agent_id,
                include_knowledge=include_knowledge,
            ),
        )
        # Not the answer's JSON as text (FastMCP's default): hosts hand the text content to
        # the model, and a 996-token block with its parts, as indented JSON, is 13,091 tokens
        # (bench/mcp.py).
        return CallToolResult(
            content=[TextContent(type="text", text=block.text)],
            structuredContent=block.model_dump(mode="json"),
        )

    async def get_memory(
        self,
        memory_id: MemoryId,
        ctx: McpContext,
        recall: Annotated[
            int | None,
            Field(description="also return the raw source turns, with this many around each"),
        ] = 2,
        agent_id: AgentId = None,
    ) -> Memory:
        """One memory with total recall: the raw conversation turns it came from."""
        return await self._call(
            ctx,
            lambda c: c.get_memory(memory_id, recall=recall, agent_id=agent_id),
            not_found="memory_id",
        )

    async def list_memories(
        self,
        user_id: UserId,
        ctx: McpContext,
        limit: Annotated[int, Field(description="at most this many (1-500)")] = 50,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
        include_superseded: Annotated[
            bool, Field(description="also memories a later one replaced")
        ] = False,
        agent_id: AgentId = None,
    ) -> MemoryPage:
        """A user's memories, newest first, a page at a time."""
        return await self._call(
            ctx,
            lambda c: c.list_memories(
                user_id,
                limit=limit,
                cursor=cursor,
                include_superseded=include_superseded,
                agent_id=agent_id,
            ),
        )

    async def entity_graph(
        self,
        user_id: UserId,
        name: Annotated[str, Field(description="the entity (person, place, project …)")],
        ctx: McpContext,
        depth: Annotated[int, Field(description="hops from the entity (1-4)")] = 2,
        limit: Annotated[int, Field(description="at most this many relations")] = 50,
        agent_id: AgentId = None,
    ) -> EntityGraph:
        """The relations around an entity the user's memories mention, as facts."""
        return await self._call(
            ctx,
            lambda c: c.entity_graph(user_id, name, depth=depth, limit=limit, agent_id=agent_id),
            not_found="name",
        )

    async def record_procedure(
        self,
        user_id: UserId,
        query: Annotated[str, Field(description="the task the tools were run for")],
        tool_sequence: Annotated[
            list[str | dict[str, Any]],
            Field(description="the tools in the order run (names, or objects with a name)"),
        ],
        success: Annotated[float, Field(description="how well it went, 0 (failed) to 1")],
        duration_ms: Annotated[float, Field(description="how long the run took")],
        ctx: McpContext,
    ) -> Procedure:
        """Count one run of a tool sequence for a task, so it can be suggested later."""
        return await self._call(
            ctx,
            lambda c: c.record_procedure(user_id, query, tool_sequence, success, duration_ms),
        )

    async def suggest_procedure(
        self,
        user_id: UserId,
        query: Annotated[str, Field(description="the task about to be done")],
        ctx: McpContext,
        min_confidence: Annotated[
            float | None, Field(description="only sequences this trusted (0-1)")
        ] = None,
    ) -> Suggestion | None:
        """A tool sequence that worked for a similar task, or null when none is trusted."""
        return await self._call(
            ctx, lambda c: c.suggest_procedure(user_id, query, min_confidence=min_confidence)
        )

    async def forget_user(self, user_id: UserId, ctx: McpContext) -> ForgetReport:
        """Erase everything about a user from every layer (irreversible)."""
        return await self._call(ctx, lambda c: c.forget_user(user_id))

    async def stats(self, ctx: McpContext) -> Stats:
        """Rows per memory layer for this API key's tenant, and its number of users."""
        return await self._call(ctx, lambda c: c.stats())


_READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
_WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
_ERASE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)


def register_tools(server: FastMCP, tools: EngramTools) -> None:
    """Add every tool to the server, with hints saying which ones read, write or erase."""
    for fn, hints in (
        (tools.record_turns, _WRITE),
        (tools.record_events, _WRITE),
        (tools.remember, _WRITE),
        (tools.search, _READ),
        (tools.assemble_context, _READ),
        (tools.get_memory, _READ),
        (tools.list_memories, _READ),
        (tools.entity_graph, _READ),
        (tools.record_procedure, _WRITE),
        (tools.suggest_procedure, _READ),
        (tools.forget_user, _ERASE),
        (tools.stats, _READ),
    ):
        server.add_tool(
            fn,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=hints,
            structured_output=True,
        )
