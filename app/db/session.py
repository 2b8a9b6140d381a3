"""Engines and the unit of work: one transaction, scoped to one tenant by row-level security."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings, get_settings
from app.db.base import AGENT_SETTING, ALL_AGENTS_SETTING, TENANT_SETTING
from app.db.bootstrap import database_urls

_engines: dict[str, Engine] = {}


def _engine(url: str) -> Engine:
    if url not in _engines:
        _engines[url] = create_engine(
            url, pool_size=5, max_overflow=10, pool_pre_ping=True, pool_recycle=1800
        )
    return _engines[url]


def app_engine(settings: Settings | None = None) -> Engine:
    """The application's engine: its role is subject to row-level security."""
    return _engine(database_urls(settings).app)


def owner_engine(settings: Settings | None = None) -> Engine:
    """The schema owner's engine: migrations and cross-tenant maintenance only."""
    return _engine(database_urls(settings).owner)


def dispose_engines(*, close: bool = True) -> None:
    """Drop pooled connections; after a fork pass close=False to leave the parent's alone."""
    for engine in _engines.values():
        engine.dispose(close=close)
    _engines.clear()


def set_tenant(session: Session, tenant_id: str) -> None:
    """Scope the current transaction to a tenant; reverts at commit/rollback by design."""
    session.execute(
        text("SELECT set_config(:name, :tenant, true)"),
        {"name": TENANT_SETTING, "tenant": tenant_id},
    )


def set_agent(session: Session, agent_id: str | None = None, *, all_agents: bool = False) -> None:
    """Scope the transaction to one agent's private rows, or (background work) to every
    agent's. Without it a transaction sees the user-level and shared rows only."""
    if all_agents:
        session.execute(text("SELECT set_config(:name, 'on', true)"), {"name": ALL_AGENTS_SETTING})
    elif agent_id is not None:
        session.execute(
            text("SELECT set_config(:name, :agent, true)"),
            {"name": AGENT_SETTING, "agent": agent_id},
        )


@contextmanager
def unit_of_work(
    tenant_id: str | None = None,
    *,
    engine: Engine | None = None,
    agent_id: str | None = None,
    all_agents: bool = False,
) -> Iterator[Session]:
    """One transaction: commits on success, rolls back on error; repositories never commit.

    `agent_id` lets a request see that agent's private map besides the shared rows;
    `all_agents` is for background work (extraction, dream, decay, forgetting), which must
    see every agent's rows."""
    factory = sessionmaker(bind=engine or app_engine(get_settings()), expire_on_commit=False)
    with factory() as session, session.begin():
        if tenant_id is not None:
            set_tenant(session, tenant_id)
        set_agent(session, agent_id, all_agents=all_agents)
        yield session
