"""The decay pass (beat, hourly): every tenant, in bounded batches, one transaction each.

The tick is the pass's clock time truncated to the decay interval, so a second beat or a
retried task in the same interval works on the same tick: rows the first run reached are
skipped, a crashed run resumes where it stopped, and nothing decays twice.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from app.config import Settings
from app.db.session import unit_of_work
from app.layers.semantic import decay as decay_sql
from app.services.jobs import run_job, tenants

_log = logging.getLogger(__name__)

FIRST_ID = uuid.UUID(int=0)


def tick_of(now: datetime, interval_s: float) -> datetime:
    seconds = int(now.timestamp() // interval_s * interval_s)
    return datetime.fromtimestamp(seconds, UTC)


def decay_tenant(settings: Settings, tenant_id: str, tick: datetime) -> tuple[int, int] | None:
    """(rows decayed, rows archived) for one tenant at `tick`; None if another run has it."""
    with run_job("decay", tenant_id, tick=tick) as run:
        if run is None:
            return None
        after = FIRST_ID
        while True:
            with unit_of_work(tenant_id) as session:
                batch = decay_sql.decay_batch(
                    session=session,
                    tenant_id=tenant_id,
                    tick=tick,
                    after=after,
                    limit=settings.decay_batch,
                    base_days=settings.decay_half_life_days,
                    floor=settings.decay_floor,
                )
            run.rows += batch.rows
            run.detail["archived"] = run.detail.get("archived", 0) + batch.archived
            if batch.last_id is None or batch.rows < settings.decay_batch:
                break
            after = batch.last_id
        return run.rows, int(run.detail.get("archived", 0))


def run_decay(settings: Settings, *, now: datetime | None = None) -> int:
    """One pass over every tenant; returns the rows decayed."""
    tick = tick_of(now or datetime.now(UTC), settings.decay_interval_s)
    total = 0
    for tenant_id in tenants():
        done = decay_tenant(settings, tenant_id, tick)
        if done is not None:
            total += done[0]
    return total


def restore_memories(
    settings: Settings, tenant_id: str, ids: list[uuid.UUID], *, now: datetime | None = None
) -> list[uuid.UUID]:
    """Archived memories back into search; returns the ids that were archived."""
    with unit_of_work(tenant_id) as session:
        return decay_sql.restore(
            session=session,
            ids=ids,
            importance=settings.restore_importance,
            now=now or datetime.now(UTC),
        )
