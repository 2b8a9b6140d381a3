"""L1 operations that outlive a request: flushing summaries before Redis expires them."""

from __future__ import annotations

import logging
from collections import defaultdict

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.working import repository
from app.layers.working.store import WorkingMemory, WorkingMemoryStore

_log = logging.getLogger(__name__)


def flush_idle(store: WorkingMemoryStore, settings: Settings, *, limit: int = 1000) -> int:
    """Copy the summary of every user idle for (TTL - margin) to Postgres; returns users flushed.

    Runs well before the idle TTL ends (beat every few minutes, margin default 10 min), so the
    summary reaches Postgres while Redis still has it. Users active again since are kept in the
    active index; the flush itself is an upsert, so running it twice is harmless.
    """
    idle_for = settings.working_idle_ttl_s - settings.working_flush_margin_s
    users = store.idle_users(idle_for, limit=limit)
    if not users:
        return 0
    by_tenant: dict[str, list[WorkingMemory]] = defaultdict(list)
    for tenant_id, user_id in users:
        memory = store.read(tenant_id, user_id)
        if memory is not None:
            by_tenant[tenant_id].append(memory)
    for tenant_id, memories in by_tenant.items():
        with unit_of_work(tenant_id) as session:
            for memory in memories:
                repository.upsert_summary(session=session, memory=memory)
    store.forget_active(users, idle_for)
    flushed = sum(len(m) for m in by_tenant.values())
    _log.info("flushed working-memory summaries of %d idle users", flushed)
    return flushed
