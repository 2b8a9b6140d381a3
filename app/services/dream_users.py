"""Who the dream beat runs for: users with salience entries waiting first, then users with
recent memories never replayed (explicit memories raise no salience entry), so both kinds of
memory consolidate within a bounded number of users per run."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import redis

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import DreamKeys
from app.layers.semantic import dream as dream_sql
from app.services.dream_identity import cycle_id_for, cycle_window, window_start
from app.services.dream_routing import as_text
from app.services.jobs import tenants

RECENT_WINDOWS = 2  # "recent memories": dated within this many windows


def _split(member: Any) -> tuple[str, str] | None:
    tenant, sep, user = as_text(member).partition("|")
    return (tenant, user) if sep and tenant and user else None


def select_users(
    settings: Settings,
    client: redis.Redis,
    now: datetime,
    tenant_id: str | None = None,
) -> list[tuple[str, str]]:
    """Up to ENGRAM_DREAM_USERS_PER_RUN users whose cycle of the current window has not run:
    first those with salience entries waiting (longest waiting first), then those with
    recent never-replayed memories (explicit memories), least recently dreamt first."""
    keys = DreamKeys.from_settings(settings)
    cap = settings.dream_users_per_run
    window = cycle_window(now, settings.dream_interval_s)
    start = window_start(window, settings.dream_interval_s)
    waiting: list[tuple[str, str]] = []
    for member in client.zrange(keys.users(), 0, cap * 10 - 1):
        pair = _split(member)
        if pair is not None and (tenant_id is None or pair[0] == tenant_id):
            waiting.append(pair)
    chosen: list[tuple[str, str]] = []
    by_tenant: dict[str, list[str]] = {}
    for tenant, user in waiting:
        by_tenant.setdefault(tenant, []).append(user)
    for tenant, users in by_tenant.items():
        ids = {cycle_id_for(tenant, u, window): u for u in users}
        with unit_of_work(tenant, all_agents=True) as session:
            done = dream_sql.cycles_done(session=session, cycle_ids=list(ids))
        chosen += [(tenant, u) for c, u in ids.items() if c not in done]
    order = {pair: i for i, pair in enumerate(waiting)}
    chosen = sorted(chosen, key=order.__getitem__)[:cap]
    seen = set(chosen)
    since = start - timedelta(seconds=settings.dream_interval_s * (RECENT_WINDOWS - 1))
    for tenant in [tenant_id] if tenant_id is not None else tenants():
        if len(chosen) >= cap:
            break
        with unit_of_work(tenant, all_agents=True) as session:
            users = dream_sql.recent_users(
                session=session,
                tenant_id=tenant,
                since=since,
                window_start=start,
                limit=cap,
            )
        for user in users:
            if (tenant, user) not in seen and len(chosen) < cap:
                chosen.append((tenant, user))
                seen.add((tenant, user))
    return chosen
