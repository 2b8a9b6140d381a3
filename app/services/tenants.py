"""Tenants and their API keys.

A key is `egk_<prefix>_<secret>`: 160 random bits, shown once; only its SHA-256 is stored (a
slow hash buys nothing for a random secret of this size, and the lookup stays one index probe).

Postgres is the truth about keys. Revoking also leaves a marker in Redis for as long as an API
process may still accept the key from its last-known-good cache while Postgres is down (see
app/api/auth.py): the marker is keyed by tenant and key prefix, which both the revoker and the
holder of the key know, so an outage that starts right after a revocation does not revive it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

import redis

from app.config import Settings, get_settings
from app.db.session import app_engine, owner_engine, unit_of_work
from app.keys import RedisKeys
from app.layers.meta import api_keys
from app.layers.meta.repository import register_tenants
from app.redis_client import get_redis
from app.streams.events import is_identifier

_log = logging.getLogger(__name__)

KEY_PREFIX = "egk"
# How long a revocation marker outlives the longest a revoked key could be taken from a
# last-known-good entry: the stale bound plus the normal cache TTL, with room for clock slack.
REVOCATION_MARGIN_S = 120


class TenantError(ValueError):
    pass


@dataclass(frozen=True)
class MintedKey:
    id: uuid.UUID
    tenant_id: str
    key: str  # the secret: shown once, never stored


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_prefix(key: str) -> str | None:
    """The public prefix of a well-formed key (`egk_<prefix>_…`), else None."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1]:
        return None
    return parts[1]


def create_tenant(tenant_id: str, *, settings: Settings | None = None) -> None:
    """Register a tenant (operator's CLI, owner role): the app role cannot write the registry."""
    if not is_identifier(tenant_id):
        raise TenantError(
            f"tenant id {tenant_id!r} must be 1-128 of letters, digits and . _ : @ - "
            "(starting with a letter or digit)"
        )
    with unit_of_work(engine=owner_engine(settings)) as session:
        register_tenants(session=session, tenant_ids=[tenant_id])


def mint_key(tenant_id: str, name: str = "", *, settings: Settings | None = None) -> MintedKey:
    create_tenant(tenant_id, settings=settings)
    prefix = secrets.token_hex(4)
    key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(20)}"
    with unit_of_work(engine=owner_engine(settings)) as session:
        key_id = api_keys.insert_key(
            session=session,
            tenant_id=tenant_id,
            name=name[:128],
            key_prefix=prefix,
            key_hash=key_digest(key),
        )
    return MintedKey(id=key_id, tenant_id=tenant_id, key=key)


def revoke_key(
    key_id: uuid.UUID, *, settings: Settings | None = None, client: redis.Redis | None = None
) -> bool:
    """Revoke in Postgres, then announce it in Redis for API processes running on a
    last-known-good cache. A failed announcement is logged, not raised: the revocation stands,
    and only an outage within `api_key_stale_s` of the key's last check could still pass it."""
    settings = settings or get_settings()
    with unit_of_work(engine=owner_engine(settings)) as session:
        if not api_keys.revoke_key(session=session, key_id=key_id):
            return False
        revoked = [k for k in api_keys.list_keys(session=session, tenant_id=None) if k.id == key_id]
    try:
        client = get_redis(settings) if client is None else client
        ttl = int(settings.api_key_stale_s) + REVOCATION_MARGIN_S
        for row in revoked:
            client.set(
                RedisKeys.from_settings(settings).revoked_key(row.tenant_id, row.key_prefix),
                "1",
                ex=ttl,
            )
    except redis.RedisError as exc:
        _log.warning("key %s revoked, but not announced in Redis: %s", key_id, exc)
    return True


def revocation_announced(client: redis.Redis, settings: Settings, tenant_id: str, key: str) -> bool:
    """Whether this key's revocation was announced (raises RedisError if Redis is down)."""
    prefix = key_prefix(key)
    if prefix is None:
        return True  # not a key that could have been minted
    return bool(client.exists(RedisKeys.from_settings(settings).revoked_key(tenant_id, prefix)))


def list_keys(tenant_id: str | None = None, *, settings: Settings | None = None) -> list[Any]:
    with unit_of_work(engine=owner_engine(settings)) as session:
        return api_keys.list_keys(session=session, tenant_id=tenant_id)


def tenant_for_key(key: str, *, settings: Settings | None = None) -> str | None:
    """The tenant of a live key, looked up as the application role (no tenant scope yet)."""
    if not key.startswith(f"{KEY_PREFIX}_") or len(key) > 200:
        return None
    with unit_of_work(engine=app_engine(settings)) as session:
        return api_keys.tenant_of(session=session, key_hash=key_digest(key))
