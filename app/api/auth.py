"""API keys → tenant. Every route but /healthz depends on `tenant_id`; the tenant it returns
scopes every query the route runs (row-level security), and nothing in a body can widen it.

Keys are checked against Postgres and cached per API process, with two bounds:

- fresh: an answer is reused for CACHE_TTL_S, so a revocation takes effect within that time on
  every process while Postgres answers;
- last-known-good: while Postgres does not answer, a key Postgres confirmed within
  `api_key_stale_s` (15 minutes by default) is still taken, so capture, which needs only Redis,
  goes on through a database outage. A key revoked before the outage is refused all the same:
  `revoke_key` leaves a marker in Redis, checked on this path. Without Redis that check cannot
  be made, and the request gets 503. A key not confirmed within the bound gets 503 with
  Retry-After (app/api/outage.py), never 401: its state is unknown, not bad.

Routes behind a stale key that need Postgres fail on their own with 503; only those served by
Redis alone (capture) answer normally.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.api.outage import database_down
from app.services.tenants import key_digest, revocation_announced, tenant_for_key

_log = logging.getLogger(__name__)

# Revocation takes effect within this many seconds on every API process (Postgres up).
CACHE_TTL_S = 5.0
MAX_ENTRIES = 10_000

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_header = APIKeyHeader(name="X-API-Key", auto_error=False)


class KeyRevokedError(Exception):
    """Postgres is down, but Redis says this key was revoked."""


@dataclass
class _Entry:
    tenant: str | None
    fresh_until: float  # reuse without asking Postgres until then
    confirmed_at: float  # when Postgres last said this key is live (tenant is not None)


class Unanswered(enum.Enum):
    """No fresh answer is held for a key: Postgres (or the fallback) must be asked."""

    UNANSWERED = "unanswered"


UNANSWERED = Unanswered.UNANSWERED


class KeyCache:
    """Per-process cache of key digest → tenant, with a last-known-good fallback."""

    def __init__(
        self,
        lookup: Callable[[str], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def fresh(self, key: str) -> str | Unanswered | None:
        """The key's tenant (None: unknown or revoked) while a fresh answer is held, else
        UNANSWERED: no I/O, so the event loop may ask it before `get` is needed."""
        # Read without the lock, which writers hold through an eviction's sort: one dict
        # read is atomic, and the event loop must not wait on a flood of unknown keys.
        entry = self._entries.get(key_digest(key))
        if entry is not None and entry.fresh_until > self._clock():
            return entry.tenant
        return UNANSWERED

    def get(self, key: str, *, stale_s: float, revoked: Callable[[str], bool]) -> str | None:
        """The key's tenant, or None if it is unknown or revoked. Raises the database error if
        Postgres is down and no usable last-known-good entry exists; `revoked(tenant)` is asked
        only then, and KeyRevokedError raised if it says so."""
        digest = key_digest(key)
        now = self._clock()
        with self._lock:
            entry = self._entries.get(digest)
        if entry is not None and entry.fresh_until > now:
            return entry.tenant
        try:
            tenant = self._lookup(key)
        except Exception as exc:
            if not database_down(exc) or entry is None or entry.tenant is None:
                raise
            if now - entry.confirmed_at > stale_s:
                raise
            if revoked(entry.tenant):
                self._store(digest, _Entry(None, now + CACHE_TTL_S, now))
                raise KeyRevokedError from exc
            # Ask Postgres again after a TTL, not on every request of the outage; never past
            # the bound.
            until = min(now + CACHE_TTL_S, entry.confirmed_at + stale_s)
            self._store(digest, _Entry(entry.tenant, until, entry.confirmed_at))
            return entry.tenant
        self._store(digest, _Entry(tenant, now + CACHE_TTL_S, now))
        return tenant

    def _store(self, digest: str, entry: _Entry) -> None:
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES and digest not in self._entries:
                self._evict()
            self._entries[digest] = entry

    def _evict(self) -> None:
        """Unknown keys go first, so a flood of bad keys cannot push out the good ones."""
        unknown = [d for d, e in self._entries.items() if e.tenant is None]
        for digest in unknown:
            del self._entries[digest]
        if len(self._entries) >= MAX_ENTRIES:
            oldest = sorted(self._entries, key=lambda d: self._entries[d].confirmed_at)
            for digest in oldest[: len(oldest) // 2]:
                del self._entries[digest]


_cache = KeyCache(tenant_for_key)


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"}
    )


async def tenant_id(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header: Annotated[str | None, Depends(_header)],
) -> str:
    """Async, so a key answered within CACHE_TTL_S costs no hop to a worker thread (~1 ms
    of a search through the API on a busy machine); only a lookup, which may wait on
    Postgres or Redis, runs in the thread pool."""
    key = bearer.credentials if bearer is not None else header
    if not key:
        raise _unauthorized(
            "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
        )
    tenant = _cache.fresh(key)
    if tenant is UNANSWERED:
        tenant = await run_in_threadpool(_look_up, request.app.state.engram, key)
    if tenant is None:
        raise _unauthorized("invalid or revoked API key")
    request.state.tenant_id = tenant
    return tenant


def _look_up(state: Any, key: str) -> str | None:
    def revoked(tenant: str) -> bool:
        return revocation_announced(state.redis, state.settings, tenant, key)

    try:
        return _cache.get(key, stale_s=state.settings.api_key_stale_s, revoked=revoked)
    except KeyRevokedError:
        return None


Tenant = Annotated[str, Depends(tenant_id)]
