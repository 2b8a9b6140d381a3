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
    port: Annotated[int, typer.Option(min=0, max=65535, help="HTTP: port (endpoint /mcp).")] = 8765,
) -> None:
    """Serve the MCP tools over the REST API. stdio acts with ENGRAM_API_KEY; HTTP with each
    caller's own key (Authorization: Bearer), never with one of its own."""
    from engram_memory_client import EngramClient

    from app.cli.errors import busy_port
    from app.mcp import server

    api_key = os.environ.get("ENGRAM_API_KEY", "").strip()
    if transport == "stdio" and not api_key:
        raise typer.BadParameter(
            "set ENGRAM_API_KEY to a tenant API key (engram tenant create / key create)",
            param_hint="ENGRAM_API_KEY",
        )
    # A URL or key no request can carry is refused now, not at every tool call.
    try:
        EngramClient(url, api_key if transport == "stdio" else "egk_check").close()
    except ValueError as exc:
        hint = "--url / ENGRAM_URL" if "base_url" in str(exc) else "ENGRAM_API_KEY"
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    if transport == "http":
        if (problem := busy_port(host, port)) is not None:
            raise typer.BadParameter(f"{problem.what}; {problem.fix}", param_hint="--port")
        server.run_http(url, host=host, port=port)
        return
    import anyio

    anyio.run(server.run_stdio, url, api_key)
