"""SQL for the meta layer's tables (tenant registry for now)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.layers.meta.models import Tenant


def register_tenants(*, session: Session, tenant_ids: Iterable[str]) -> None:
    rows = [{"tenant_id": t} for t in sorted(set(tenant_ids))]
    if rows:
        session.execute(insert(Tenant).values(rows).on_conflict_do_nothing())


def list_tenants(*, session: Session) -> list[str]:
    return list(session.scalars(select(Tenant.tenant_id).order_by(Tenant.tenant_id)))
