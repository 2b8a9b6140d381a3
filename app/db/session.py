"""Engines and the unit of work: one transaction, scoped to one tenant by row-level security."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.db.base import AGENT_SETTING, ALL_AGENTS_SETTING, TENANT_SETTING
from app.db.bootstrap import database_urls
from app.db.rows import TEXT_IDS

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
    generic_plans: bool = False,
    text_ids: bool = False,
) -> Iterator[Session]:
    """One transaction: commits on success, rolls back on error; repositories never commit.

    `agent_id` lets a request see that agent's private map besides the shared rows;
    `all_agents` is for background work (extraction, dream, decay, forgetting), which must
    see every agent's rows. `generic_plans` and `text_ids` are for a search's reads (see
    GENERIC_PLANS; app/db/rows.py TEXT_IDS: its ids come back as text)."""
    bind = engine or app_engine(get_settings())
    with Session(bind=bind, expire_on_commit=False) as session, session.begin():
        _scope(session, tenant_id, agent_id, all_agents=all_agents, generic_plans=generic_plans)
        if text_ids:
            session.info[TEXT_IDS] = True
        yield session


# A search's reads name their rows by arrays of a few hundred ids (the fused turns, the found
# memories) and their user by parameter: planned for the values at every call, each array
# element is estimated and the partitions pruned again; the generic plan a prepared
# statement keeps (app/db/rows.py prepares them) prunes as it runs. Which dense plan serves
# a user is fixed by the statement's text (app/db/nearest.py), not by the planner.
GENERIC_PLANS = ("plan_cache_mode", "force_generic_plan")


def _scope(
    session: Session,
    tenant_id: str | None,
    agent_id: str | None,
    *,
    all_agents: bool,
    generic_plans: bool = False,
) -> None:
    """set_tenant and set_agent in one statement: every unit of work opens with it, and
    background steps open many small ones."""
    # What row-level security lets this transaction see, for per-process memos of what it
    # read (app/db/remembered.py scope_key): an agent's private rows are not another's.
    session.info["rls_scope"] = (tenant_id, agent_id, all_agents)
    settings: list[tuple[str, str]] = [GENERIC_PLANS] if generic_plans else []
    if tenant_id is not None:
        settings.append((TENANT_SETTING, tenant_id))
    if all_agents:
        settings.append((ALL_AGENTS_SETTING, "on"))
    elif agent_id is not None:
        settings.append((AGENT_SETTING, agent_id))
    if not settings:
        return
    calls = ", ".join(f"set_config(:n{i}, :v{i}, true)" for i in range(len(settings)))
    params: dict[str, str] = {}
    for i, (name, value) in enumerate(settings):
        params[f"n{i}"], params[f"v{i}"] = name, value
    session.execute(text(f"SELECT {calls}"), params)
