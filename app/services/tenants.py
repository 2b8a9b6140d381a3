"""Tenants and their API keys.

A key is `egk_<prefix>_<secret>`: 160 random bits, shown once; only its SHA-256 is stored (a
slow hash buys nothing for a random secret of this size, and the lookup stays one index probe).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from app.db.session import owner_engine, unit_of_work
from app.layers.meta import api_keys
from app.layers.meta.repository import register_tenants
from app.streams.events import IDENTIFIER

KEY_PREFIX = "egk"


class TenantError(ValueError):
    pass


@dataclass(frozen=True)
class MintedKey:
    id: uuid.UUID
    tenant_id: str
    key: str  # the secret: shown once, never stored


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_tenant(tenant_id: str) -> None:
    if not re.match(IDENTIFIER, tenant_id):
        raise TenantError(
            f"tenant id {tenant_id!r} must be 1-128 of letters, digits and . _ : @ - "
            "(starting with a letter or digit)"
        )
    with unit_of_work(engine=owner_engine()) as session:
        register_tenants(session=session, tenant_ids=[tenant_id])


def mint_key(tenant_id: str, name: str = "") -> MintedKey:
    create_tenant(tenant_id)
    prefix = secrets.token_hex(4)
    key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(20)}"
    with unit_of_work(engine=owner_engine()) as session:
        key_id = api_keys.insert_key(
            session=session,
            tenant_id=tenant_id,
            name=name[:128],
            key_prefix=prefix,
            key_hash=key_digest(key),
        )
    return MintedKey(id=key_id, tenant_id=tenant_id, key=key)


def revoke_key(key_id: uuid.UUID) -> bool:
    with unit_of_work(engine=owner_engine()) as session:
        return api_keys.revoke_key(session=session, key_id=key_id)


def list_keys(tenant_id: str | None = None) -> list[Any]:
    with unit_of_work(engine=owner_engine()) as session:
        return api_keys.list_keys(session=session, tenant_id=tenant_id)


def tenant_for_key(key: str) -> str | None:
    """The tenant of a live key, looked up as the application role (no tenant scope yet)."""
    if not key.startswith(f"{KEY_PREFIX}_") or len(key) > 200:
        return None
    with unit_of_work() as session:
        return api_keys.tenant_of(session=session, key_hash=key_digest(key))
