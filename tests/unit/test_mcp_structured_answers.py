"""A tool's structured answer leaves the server as a finished CallToolResult (app/mcp/server.py):
the same content and structured content the SDK would build, checked against the listed output
schema here rather than by the low-level server on every call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import jsonschema
import pytest
from mcp.types import CallToolRequest, CallToolRequestParams, CallToolResult, TextContent
from pydantic import BaseModel

from app.mcp.server import EngramMCP


class Hit(BaseModel):
    content: str
    score: float
    session_id: str | None = None
    occurred_at: datetime


class Found(BaseModel):
    hits: list[Hit]
    took_ms: float = 0.0


def _server() -> EngramMCP:
    server = EngramMCP("test")

    @server.tool()
    def find(query: str, limit: int = 2) -> Found:
        """Hits for the query."""
        at = datetime(2026, 5, 1, 12, tzinfo=UTC)
        return Found(
            hits=[
                Hit(content=f"{query} {i}", score=1 / (i + 1), occurred_at=at) for i in range(limit)
            ]
        )

    return server


def _request(name: str, arguments: dict[str, Any]) -> CallToolRequest:
    return CallToolRequest(
        method="tools/call", params=CallToolRequestParams(name=name, arguments=arguments)
    )


def test_a_structured_answer_is_a_finished_result_that_conforms_to_the_listed_schema() -> None:
    server = _server()

    async def scenario() -> None:
        (tool,) = await server.list_tools()
        result = await server.call_tool("find", {"query": "kayak", "limit": 3})
        assert isinstance(result, CallToolResult)
        assert not result.isError
        assert result.structuredContent is not None
        assert [h["content"] for h in result.structuredContent["hits"]] == [
            "kayak 0",
            "kayak 1",
            "kayak 2",
        ]
        assert result.structuredContent["hits"][0]["occurred_at"] == "2026-05-01T12:00:00Z"
        jsonschema.Draft202012Validator(tool.outputSchema).validate(result.structuredContent)
        (text,) = result.content
        assert isinstance(text, TextContent) and '"kayak 2"' in text.text

    anyio.run(scenario)


def test_the_low_level_server_does_not_recheck_the_schema_on_every_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's one-shot `jsonschema.validate` checks the output schema against the 2020-12
    metaschema per call (85 % of the server's CPU for a search); a call must not reach it."""
    server = _server()
    handler = server._mcp_server.request_handlers[CallToolRequest]
    checked: list[object] = []
    monkeypatch.setattr(jsonschema, "validate", lambda *a, **k: checked.append(a))

    async def scenario() -> None:
        answer = await handler(_request("find", {"query": "tent"}))
        assert isinstance(answer.root, CallToolResult)
        assert not answer.root.isError
        assert len(answer.root.structuredContent["hits"]) == 2

    anyio.run(scenario)
    assert checked == []


def test_argument_errors_still_come_back_as_tool_errors_naming_the_argument() -> None:
    server = _server()
    handler = server._mcp_server.request_handlers[CallToolRequest]

    async def scenario() -> None:
        wrong = await handler(_request("find", {"query": "tent", "limit": "many"}))
        assert wrong.root.isError
        assert "limit" in wrong.root.content[0].text
        unknown = await handler(_request("find", {"query": "tent", "limt": 3}))
        assert unknown.root.isError
        assert "limt: unexpected argument" in unknown.root.content[0].text

    anyio.run(scenario)
