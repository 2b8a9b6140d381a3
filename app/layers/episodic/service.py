"""Episodic operations beyond ingest: closing sessions that went idle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.episodic import repository
from app.layers.meta.repository import list_tenants


def close_idle_sessions(settings: Settings, *, now: datetime | None = None) -> int:
    """Close sessions idle past the timeout, one tenant (one RLS scope) at a time."""
    before = (now or datetime.now(UTC)) - timedelta(seconds=settings.session_idle_timeout_s)
    with unit_of_work() as session:
        tenants = list_tenants(session=session)
    closed = 0
    for tenant_id in tenants:
        with unit_of_work(tenant_id) as session:
            closed += repository.close_idle_sessions(
                session=session, tenant_id=tenant_id, before=before
            )
    return closed
