"""The editing tools of `engram mcp` (update_memory, delete_memory, memory_history,
related_memories, clear_session) through the MCP Python SDK's own client, against the real API
(the fixtures of tests/integration/test_mcp.py: uvicorn in process, `engram mcp --transport
http` as a subprocess, two tenants' keys).
"""

from __future__ import annotations

import uuid

from tests.integration.test_mcp import (
    Api,
    api,
    call,
    http_session,
    mcp_http,
    mcp_settings,
    refused,
    run,
    wait_for_turn,
)

__all__ = ["api", "mcp_http", "mcp_settings"]  # the real API and MCP server of test_mcp

EDIT_TOOLS = {
    "update_memory",
    "delete_memory",
    "memory_history",
    "related_memories",
    "clear_session",
}


def test_edit_tools_are_typed_and_described(api: Api, mcp_http: str) -> None:
    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) >= EDIT_TOOLS
            for name in EDIT_TOOLS:
                tool = tools[name]
                assert tool.description and tool.outputSchema is not None, name
                for prop, schema in tool.inputSchema["properties"].items():
                    assert schema.get("description"), f"{name}.{prop} is not described"
            for name in ("update_memory", "delete_memory", "memory_history", "related_memories"):
                properties = tools[name].inputSchema["properties"]
                assert properties["memory_id"]["format"] == "uuid"
                assert "agent_id" in properties, name
            assert tools["update_memory"].inputSchema["required"] == ["memory_id", "content"]
            assert tools["clear_session"].inputSchema["required"] == ["user_id", "session_id"]
            assert tools["delete_memory"].annotations.destructiveHint is True
            assert tools["clear_session"].annotations.destructiveHint is True
            assert tools["memory_history"].annotations.readOnlyHint is True

    run(scenario)


def test_edit_history_related_and_delete(api: Api, mcp_http: str) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as a, http_session(mcp_http, api.key_b) as b:
            stored = await call(
                a,
                "remember",
                user_id=user,
                memories=[
                    {"content": "Dana works at Acme."},
                    {"content": "Dana prefers morning meetings."},
                ],
            )
            first, second = (m["id"] for m in stored["result"])

            edited = await call(
                a, "update_memory", memory_id=first, content="Dana works at Globex."
            )
            assert edited["status"] == "updated" and edited["previous_id"] == first
            current = edited["memory"]["id"]
            assert edited["memory"]["content"] == "Dana works at Globex."
            again = await call(a, "update_memory", memory_id=first, content="Dana works at Globex.")
            assert again["status"] == "unchanged" and again["memory"]["id"] == current
            conflict = await refused(a, "update_memory", memory_id=first, content="Dana quit.")
            assert "409" in conflict and current in conflict and "memory_id" in conflict

            history = await call(a, "memory_history", memory_id=first)
            assert history["current_id"] == current
            assert [v["id"] for v in history["versions"]] == [first, current]
            assert [v["version"] for v in history["versions"]] == [1, 2]

            related = await call(a, "related_memories", memory_id=current)
            assert second in [r["id"] for r in related["result"]]

            # Another tenant's ids do not exist for this key.
            for tool, arguments in (
                ("update_memory", {"content": "stolen"}),
                ("delete_memory", {}),
                ("memory_history", {}),
                ("related_memories", {}),
            ):
                text = await refused(b, tool, memory_id=current, **arguments)
                assert "memory_id: not found" in text, (tool, text)
            assert (await call(a, "get_memory", memory_id=current))["content"].endswith("Globex.")

            # Bad arguments name their field.
            assert "invalid content" in await refused(
                a, "update_memory", memory_id=current, content=""
            )
            assert "memory_id: Input should be a valid UUID" in await refused(
                a, "memory_history", memory_id="nope"
            )

            deleted = await call(a, "delete_memory", memory_id=current)
            assert sorted(deleted["ids"]) == sorted([first, current])
            assert "memory_id: not found" in await refused(a, "get_memory", memory_id=current)
            assert "memory_id: not found" in await refused(a, "delete_memory", memory_id=current)
            assert "memory_id: not found" in await refused(a, "memory_history", memory_id=first)

    run(scenario)


def test_an_agents_private_memory_is_edited_by_that_agent_only(api: Api, mcp_http: str) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as a:
            stored = await call(
                a,
                "remember",
                user_id=user,
                agent_id="planner",
                memories=[{"content": "The planning review moved to Monday."}],
            )
            memory_id = stored["result"][0]["id"]
            for agent in ("coder", None):
                scope = {"agent_id": agent} if agent else {}
                for tool, arguments in (
                    ("update_memory", {"content": "hijacked"}),
                    ("delete_memory", {}),
                    ("memory_history", {}),
                    ("related_memories", {}),
                ):
                    text = await refused(a, tool, memory_id=memory_id, **arguments, **scope)
                    assert "memory_id: not found" in text, (tool, agent, text)
            edited = await call(
                a,
                "update_memory",
                memory_id=memory_id,
                content="The planning review moved to Tuesday.",
                agent_id="planner",
            )
            assert edited["memory"]["agent_id"] == "planner"
            assert edited["memory"]["shared"] is False
            history = await call(a, "memory_history", memory_id=memory_id, agent_id="planner")
            assert len(history["versions"]) == 2
            deleted = await call(a, "delete_memory", memory_id=memory_id, agent_id="planner")
            assert len(deleted["ids"]) == 2

    run(scenario)


def test_clear_session(api: Api, mcp_http: str) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as a, http_session(mcp_http, api.key_b) as b:
            await call(
                a,
                "record_turns",
                user_id=user,
                turns=[{"content": "The garage door code is 4417", "external_id": "g-1"}],
            )
            hit = await wait_for_turn(a, user, "garage door code", "g-1")
            session_id = hit["session_id"]
            assert session_id

            assert "session_id: not found" in await refused(
                b, "clear_session", user_id=user, session_id=session_id
            )
            assert "session_id: not found" in await refused(
                a, "clear_session", user_id=user, session_id=str(uuid.uuid4())
            )
            cleared = await call(a, "clear_session", user_id=user, session_id=session_id)
            assert cleared["session_id"] == session_id
            assert cleared["rows"]["turns"] == 1 and cleared["rows"]["sessions"] == 1
            assert (await call(a, "search", user_id=user, query="garage door"))["hits"] == []
            assert "session_id: not found" in await refused(
                a, "clear_session", user_id=user, session_id=session_id
            )
            assert "invalid user_id" in await refused(
                a, "clear_session", user_id="no spaces", session_id=session_id
            )

    run(scenario)
