"""SQL for tenant API keys. Minting and revoking run as the owner (the operator's CLI);
the request path only calls `meta.api_key_tenant()`, which reveals the tenant of a live key."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session


def insert_key(
    *, session: Session, tenant_id: str, name: str, key_prefix: str, key_hash: str
) -> uuid.UUID:
    key_id = uuid.uuid4()
    session.execute(
        text(
            "INSERT INTO meta.api_keys (id, tenant_id, name, key_prefix, key_hash)"
            " VALUES (:id, :tenant, :name, :prefix, :hash)"
        ),
        {"id": key_id, "tenant": tenant_id, "name": name, "prefix": key_prefix, "hash": key_hash},
    )
    return key_id


def revoke_key(*, session: Session, key_id: uuid.UUID) -> bool:
    result = session.execute(
        text("UPDATE meta.api_keys SET revoked_at = now() WHERE id = :id AND revoked_at IS NULL"),
        {"id": key_id},
    )
    return bool(result.rowcount)


def list_keys(*, session: Session, tenant_id: str | None) -> list[Any]:
    return list(
        session.execute(
            text(
                "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at FROM meta.api_keys"
                " WHERE CAST(:tenant AS text) IS NULL OR tenant_id = :tenant"
                " ORDER BY tenant_id, created_at"
            ),
            {"tenant": tenant_id},
        )
    )


def tenant_of(*, session: Session, key_hash: str) -> str | None:
    return session.execute(
        text("SELECT meta.api_key_tenant(:hash)"), {"hash": key_hash}
    ).scalar_one()
