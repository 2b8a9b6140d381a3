"""SQL for the meta layer's tables (tenant registry for now).

The application role may neither write `meta.tenants` nor read other tenants' rows (RLS): it
records tenants seen and lists them for maintenance through two security-definer functions
(migration b2d5f8c3e061), which is all it needs across tenants.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session
from sqlalchemy.types import Text

_REGISTER = text("SELECT meta.register_tenants(:ids)").bindparams(
    bindparam("ids", type_=ARRAY(Text()))
)


def register_tenants(*, session: Session, tenant_ids: Iterable[str]) -> None:
    """Record tenants seen (insert-or-nothing); works in any scope, as any Engram role."""
    ids = sorted(set(tenant_ids))
    if ids:
        session.execute(_REGISTER, {"ids": ids})


def list_tenants(*, session: Session) -> list[str]:
    """Every registered tenant id, for walking tenants one RLS scope at a time."""
    return list(session.scalars(text("SELECT meta.tenant_ids()")))
