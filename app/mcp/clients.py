"""The API key a tool call acts with, the SDK client that sends it, and what a refusal says.

Over stdio the key is the one `engram mcp` was started with; over streamable HTTP it is the
caller's own `Authorization: Bearer` key, checked against the API before the MCP session opens
and sent again with every tool call, so the API decides each request (a key revoked mid-session
is refused at the next call). The HTTP server never falls back to a key of its own.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

from engram_memory_client import (
    AsyncEngramClient,
    AuthenticationError,
    EngramError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    UnavailableError,
    ValidationError,
)
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.fastmcp.exceptions import ToolError

# A key the API accepted is let into new MCP requests for this long without asking again;
# tool calls are not affected (each one sends the key to the API).
KEY_CHECK_TTL_S = 30.0
MAX_CLIENTS = 256
# The user a key check lists one memory of: any answer but 401 means the key is live.
PROBE_USER = "engram-mcp-key-check"


def key_id(key: str) -> str:
    """A stable name for a key that does not reveal it (logs, MCP session ownership)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class ClientPool:
    """One SDK client per API key, so calls with the same key reuse pooled connections;
    the least recently used is closed past MAX_CLIENTS keys."""

    def __init__(self, base_url: str, *, timeout: float = 30.0, retries: int = 2) -> None:
        self.base_url = base_url
        self._timeout = timeout
        self._retries = retries
        self._clients: OrderedDict[str, AsyncEngramClient] = OrderedDict()

    async def client(self, key: str) -> AsyncEngramClient:
        """The client that sends `key`, made on first use."""
        name = key_id(key)
        found = self._clients.get(name)
        if found is not None:
            self._clients.move_to_end(name)
            return found
        made = AsyncEngramClient(
            self.base_url, key, timeout=self._timeout, retries=self._retries, backoff=0.1
        )
        self._clients[name] = made
        while len(self._clients) > MAX_CLIENTS:
            _, oldest = self._clients.popitem(last=False)
            await oldest.close()
        return made

    async def discard(self, key: str) -> None:
        """Forget a key's client (a key the API refused)."""
        found = self._clients.pop(key_id(key), None)
        if found is not None:
            await found.close()

    async def close(self) -> None:
        while self._clients:
            _, client = self._clients.popitem()
            await client.close()


class ApiKeyVerifier(TokenVerifier):
    """Streamable HTTP's gate: a bearer token is an Engram API key the API accepts."""

    def __init__(self, pool: ClientPool, clock: Callable[[], float] = time.monotonic) -> None:
        self._pool = pool
        self._clock = clock
        self._accepted: dict[str, float] = {}

    async def verify_token(self, token: str) -> AccessToken | None:
        """The key's access token, or None (401) when the API refuses it. When the API
        cannot be reached the key is let in uncached: the tool calls then say so."""
        name = key_id(token)
        if self._accepted.get(name, 0.0) > self._clock():
            return AccessToken(token=token, client_id=name, scopes=[])
        try:
            client = await self._pool.client(token)
        except ValueError:  # not even the shape of a key (spaces, non-ASCII): no API call
            return None
        try:
            await client.list_memories(PROBE_USER, limit=1)
        except AuthenticationError:
            self._accepted.pop(name, None)
            await self._pool.discard(token)
            return None
        except UnavailableError:
            return AccessToken(token=token, client_id=name, scopes=[])
        if len(self._accepted) >= MAX_CLIENTS:
            now = self._clock()
            self._accepted = {k: t for k, t in self._accepted.items() if t > now}
        self._accepted[name] = self._clock() + KEY_CHECK_TTL_S
        return AccessToken(token=token, client_id=name, scopes=[])


def tool_error(
    exc: EngramError,
    *,
    not_found: str | None = None,
    rename: Callable[[str], str] | None = None,
) -> ToolError:
    """The MCP tool error for an answer the API refused, naming the argument(s) at fault.

    `not_found` is the argument that named what does not exist (the API's 404 names no field);
    `rename` maps a REST field to the tool's own argument where they differ."""
    fields = [rename(f) if rename else f for f in exc.fields]
    named = ", ".join(fields)
    if isinstance(exc, NotFoundError):
        return ToolError(f"{not_found or named or 'id'}: not found ({exc.message})")
    if isinstance(exc, ValidationError | PayloadTooLargeError):
        return ToolError(f"invalid {named or 'request'}: {exc.message}")
    if isinstance(exc, AuthenticationError):
        return ToolError(f"API key refused by the Engram API: {exc.message}")
    if isinstance(exc, UnavailableError):
        return ToolError(f"Engram API unavailable: {exc.message}")
    if isinstance(exc, RateLimitedError):
        wait = exc.retry_after_s
        when = f"retry in {wait:g} s" if wait is not None else "retry later"
        return ToolError(f"over this tenant's share of the Engram API, {when}: {exc.message}")
    where = f" ({named})" if named else ""
    return ToolError(f"Engram API answered {exc.status}: {exc.message}{where}")
