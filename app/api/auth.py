"""API keys → tenant. Every route but /healthz depends on `tenant_id`; the tenant it returns
scopes every query the route runs (row-level security), and nothing in a body can widen it."""

from __future__ import annotations

import threading
import time
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.services.tenants import key_digest, tenant_for_key

# Revocation takes effect within this many seconds on every API process.
CACHE_TTL_S = 5.0

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_header = APIKeyHeader(name="X-API-Key", auto_error=False)


class _KeyCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str | None, float]] = {}

    def get(self, key: str) -> str | None:
        digest = key_digest(key)
        now = time.monotonic()
        with self._lock:
            found = self._entries.get(digest)
        if found is not None and found[1] > now:
            return found[0]
        tenant = tenant_for_key(key)
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (tenant, now + CACHE_TTL_S)
        return tenant


_cache = _KeyCache()


def tenant_id(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header: Annotated[str | None, Depends(_header)],
) -> str:
    key = bearer.credentials if bearer is not None else header
    if not key:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    tenant = _cache.get(key)
    if tenant is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "invalid or revoked API key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    request.state.tenant_id = tenant
    return tenant


Tenant = Annotated[str, Depends(tenant_id)]
