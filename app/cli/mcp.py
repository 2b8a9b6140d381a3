"""`engram mcp`: serve Engram's tools to MCP clients (stdio by default, or streamable HTTP)."""

from __future__ import annotations

import os
from typing import Annotated, Literal

import typer

DEFAULT_URL = "http://127.0.0.1:8080"


def serve_mcp(
    transport: Annotated[
        Literal["stdio", "http"],
        typer.Option(help="stdio: one client that spawned this; http: streamable HTTP."),
    ] = "stdio",
    url: Annotated[
        str, typer.Option(envvar="ENGRAM_URL", help="The Engram REST API to call.")
    ] = DEFAULT_URL,
    host: Annotated[str, typer.Option(help="HTTP: bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP: port (endpoint /mcp).")] = 8765,
) -> None:
    """Serve the MCP tools over the REST API. stdio acts with ENGRAM_API_KEY; HTTP with each
    caller's own key (Authorization: Bearer), never with one of its own."""
    from app.mcp import server

    if transport == "http":
        server.run_http(url, host=host, port=port)
        return
    import anyio

    api_key = os.environ.get("ENGRAM_API_KEY", "").strip()
    if not api_key:
        raise typer.BadParameter(
            "set ENGRAM_API_KEY to a tenant API key (engram tenant create / key create)",
            param_hint="ENGRAM_API_KEY",
        )
    anyio.run(server.run_stdio, url, api_key)
