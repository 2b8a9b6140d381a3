"""`engram mcp` through the MCP Python SDK's own client, against a real API server.

The API runs under uvicorn in this process on real Postgres and Redis (with an in-process ingest
consumer, as a worker's); `engram mcp` runs as a real subprocess, once over stdio (spawned by
the SDK's `stdio_client`) and once over streamable HTTP (`--transport http`), each knowing only
the API's URL and, for stdio, a tenant key.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from app.config import Settings
from app.redis_client import get_redis
from app.services.ingest import IngestService
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from tests.integration.api_server import prefixed, serve

ENGRAM = str(Path(sys.executable).parent / "engram")
TOOLS = {
    "record_turns",
    "record_events",
    "remember",
    "search",
    "assemble_context",
    "get_memory",
    "list_memories",
    "entity_graph",
    "record_procedure",
    "suggest_procedure",
    "forget_user",
    "stats",
}


@dataclass(frozen=True)
class Api:
    url: str
    key_a: str
    key_b: str
    tenant_a: str
    tenant_b: str


# The first message of an MCP session over HTTP, as any client sends it.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


@pytest.fixture(scope="module")
def mcp_settings(base_settings: Settings) -> Iterator[Settings]:
    with prefixed(base_settings, "mcp", consumer_block_ms=50, claim_min_idle_ms=200) as settings:
        yield settings


@pytest.fixture(scope="module")
def api(database: None, mcp_settings: Settings) -> Iterator[Api]:
    """The real REST API, a key for each of two tenants, and an ingest consumer."""
    suffix = uuid.uuid4().hex[:8]
    tenant_a, tenant_b = f"t-mcp-a-{suffix}", f"t-mcp-b-{suffix}"
    client = get_redis(mcp_settings)
    consumer = StreamConsumer(
        client=client,
        settings=mcp_settings,
        handler=IngestService(client=client, settings=mcp_settings),
        name=f"mcp-{suffix[:6]}",
    )
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        with serve(mcp_settings) as url:
            yield Api(url, mint_key(tenant_a).key, mint_key(tenant_b).key, tenant_a, tenant_b)
    finally:
        stop.set()
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def mcp_http(api: Api) -> Iterator[str]:
    """`engram mcp --transport http` as a subprocess; yields its MCP endpoint."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "ENGRAM_API_KEY"}
    process = subprocess.Popen(
        [ENGRAM, "mcp", "--transport", "http", "--port", str(port), "--url", api.url],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(endpoint, timeout=2)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("engram mcp --transport http did not come up") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@asynccontextmanager
async def http_session(endpoint: str, key: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(endpoint, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(api: Api, key: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=ENGRAM, args=["mcp"], env={"ENGRAM_URL": api.url, "ENGRAM_API_KEY": key}
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def run(test: Callable[[], Awaitable[None]]) -> None:
    anyio.run(test)


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """The tool's structured answer; fails the test on a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.isError, f"{tool}: {error_text(result)}"
    assert result.structuredContent is not None
    return result.structuredContent


def error_text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The text of the tool error this call must come back with."""
    result = await session.call_tool(tool, arguments)
    assert result.isError, f"{tool} was expected to fail: {result.structuredContent}"
    return error_text(result)


async def wait_for_turn(session: ClientSession, user: str, query: str, external_id: str) -> dict:
    """Search through MCP until the turn is found (ingest runs beside the API)."""
    deadline = time.monotonic() + 60
    while True:
        found = await call(session, "search", user_id=user, query=query, limit=20)
        for hit in found["hits"]:
            if external_id in hit["source_turn_ids"]:
                return hit
        assert time.monotonic() < deadline, f"turn {external_id} never became searchable"
        await anyio.sleep(0.2)


def test_stdio_every_tool_end_to_end(api: Api) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with stdio_session(api, api.key_a) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) >= TOOLS
            for tool in tools.values():
                assert tool.description, tool.name
                assert tool.inputSchema["type"] == "object"
                assert tool.outputSchema is not None, tool.name
                for name, prop in tool.inputSchema.get("properties", {}).items():
                    assert prop.get("description"), f"{tool.name}.{name} is not described"
            assert tools["search"].inputSchema["required"] == ["user_id", "query"]
            assert tools["get_memory"].inputSchema["properties"]["memory_id"]["format"] == "uuid"
            assert tools["forget_user"].annotations.destructiveHint is True

            sent = await call(
                session,
                "record_turns",
                user_id=user,
                turns=[
                    {"content": "Our staging cluster runs on Kubernetes", "external_id": "s-1"},
                    {"content": "Noted.", "external_id": "s-2", "role": "assistant"},
                ],
            )
            assert sent["accepted"] == 2
            hit = await wait_for_turn(session, user, "which cluster runs on Kubernetes?", "s-1")
            assert hit["content"] == "Our staging cluster runs on Kubernetes"

            stored = await call(
                session,
                "remember",
                user_id=user,
                memories=[{"content": "Dana prefers window seats", "kind": "preference"}],
            )
            memory_id = stored["result"][0]["id"]
            assert stored["result"][0]["status"] == "created"
            memory = await call(session, "get_memory", memory_id=memory_id, recall=1)
            assert memory["content"] == "Dana prefers window seats"
            assert memory["kind"] == "preference"
            assert memory["recall"] == []  # an explicit memory cites no turn
            found = await call(session, "search", user_id=user, query="seat", unit="memories")
            assert found["hits"][0]["id"] == memory_id

            answer = await session.call_tool(
                "assemble_context", {"user_id": user, "query": "book a flight", "token_budget": 500}
            )
            assert not answer.isError, error_text(answer)
            block = answer.structuredContent
            assert block is not None
            assert "window seats" in block["text"]
            assert block["tokens"] <= 500
            # What a host hands the model is the block itself, not the answer as JSON.
            assert [c.text for c in answer.content if isinstance(c, TextContent)] == [block["text"]]

            await call(
                session,
                "record_procedure",
                user_id=user,
                query="deploy to staging",
                tool_sequence=["build", "test", "ship"],
                success=1.0,
                duration_ms=4000,
            )
            suggestion = await call(
                session, "suggest_procedure", user_id=user, query="deploy to staging"
            )
            steps = suggestion["result"]["tool_sequence"]
            assert [step["tool"] for step in steps] == ["build", "test", "ship"]

            stats = await call(session, "stats")
            assert stats["tenant_id"] == api.tenant_a
            assert stats["users"] >= 1

            forgotten = await call(session, "forget_user", user_id=user)
            assert forgotten["total"] > 0
            assert (await call(session, "list_memories", user_id=user))["memories"] == []
            assert (await call(session, "search", user_id=user, query="Kubernetes"))["hits"] == []

    run(scenario)


def test_stdio_with_a_wrong_key_says_so(api: Api) -> None:
    async def scenario() -> None:
        async with stdio_session(api, "egk_00000000_not-a-real-key") as session:
            assert "API key refused" in await refused(session, "stats")

    run(scenario)


def test_http_acts_with_each_callers_key(api: Api, mcp_http: str) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as a, http_session(mcp_http, api.key_b) as b:
            assert {t.name for t in (await a.list_tools()).tools} >= TOOLS
            stored = await call(a, "remember", user_id=user, memories=[{"content": "Tea, no milk"}])
            memory_id = stored["result"][0]["id"]
            assert (await call(a, "get_memory", memory_id=memory_id))["content"] == "Tea, no milk"
            assert (await call(a, "stats"))["tenant_id"] == api.tenant_a
            assert (await call(b, "stats"))["tenant_id"] == api.tenant_b
            # Another tenant's memory does not exist for this key.
            assert "memory_id: not found" in await refused(b, "get_memory", memory_id=memory_id)
            assert (await call(b, "search", user_id=user, query="tea"))["hits"] == []

            # An agent's private memory: found by that agent, by no other.
            private = await call(
                a,
                "remember",
                user_id=user,
                agent_id="planner",
                memories=[{"content": "The quarterly budget review is on Friday"}],
            )
            private_id = private["result"][0]["id"]
            query = {"user_id": user, "query": "budget review", "unit": "memories"}
            mine = await call(a, "search", agent_id="planner", **query)
            assert private_id in [hit["id"] for hit in mine["hits"]]
            theirs = await call(a, "search", agent_id="coder", **query)
            assert private_id not in [hit["id"] for hit in theirs["hits"]]
            assert "memory_id: not found" in await refused(
                a, "get_memory", memory_id=private_id, agent_id="coder"
            )

    run(scenario)


def test_bad_input_is_a_tool_error_naming_the_field(api: Api, mcp_http: str) -> None:
    async def scenario() -> None:
        async with http_session(mcp_http, api.key_a) as session:
            # Refused by the tool's own schema (FastMCP's validation)...
            missing = await refused(session, "search", user_id="u-1")
            assert "invalid arguments to search: query: Field required" in missing
            wrong_type = await refused(session, "search", user_id="u-1", query="x", limit="many")
            assert "limit: Input should be a valid integer" in wrong_type
            assert "memory_id: Input should be a valid UUID" in await refused(
                session, "get_memory", memory_id="not-a-uuid"
            )
            assert "turns: Input should be a valid list" in await refused(
                session, "record_turns", user_id="u-1", turns="hi"
            )
            assert "turns[0].external_id: Field required" in await refused(
                session, "record_turns", user_id="u-1", turns=[{"content": "hi"}]
            )
            # ...and by the API, with the field it named.
            assert "invalid query" in await refused(session, "search", user_id="u-1", query="")
            assert "invalid user_id" in await refused(
                session, "search", user_id="no spaces", query="x"
            )
            assert "invalid user_id" in await refused(
                session,
                "record_turns",
                user_id="no spaces",
                turns=[{"content": "hi", "external_id": "x-1"}],
            )
            assert "invalid turns[1].content" in await refused(
                session,
                "record_turns",
                user_id="u-1",
                turns=[
                    {"content": "hi", "external_id": "x-1"},
                    {"content": "", "external_id": "x-2"},
                ],
            )
            assert "invalid token_budget" in await refused(
                session, "assemble_context", user_id="u-1", query="x", token_budget=1
            )
            unknown = str(uuid.uuid4())
            assert "memory_id: not found" in await refused(session, "get_memory", memory_id=unknown)
            assert "name: not found" in await refused(
                session, "entity_graph", user_id="u-1", name="Nobody-at-all"
            )

    run(scenario)


def test_http_refuses_a_missing_or_wrong_key(api: Api, mcp_http: str) -> None:
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer egk_00000000_not-a-real-key"}):
        answer = httpx.post(mcp_http, json=INITIALIZE, headers={**accept, **headers}, timeout=30)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    good = httpx.post(
        mcp_http,
        json=INITIALIZE,
        headers={**accept, "Authorization": f"Bearer {api.key_a}"},
        timeout=30,
    )
    assert good.status_code == 200

    async def scenario() -> None:
        with pytest.raises(BaseExceptionGroup) as refused_key:
            async with http_session(mcp_http, "egk_00000000_not-a-real-key"):
                pass
        statuses = [
            e.response.status_code
            for e in flatten(refused_key.value)
            if isinstance(e, httpx.HTTPStatusError)
        ]
        assert statuses == [401]

    run(scenario)


def flatten(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in flatten(inner)]
    return [error]
