"""The decay pass (beat, hourly): every tenant, in bounded batches, one transaction each.

Batches are groups of whole users (about ENGRAM_DECAY_BATCH memories each), one transaction
per batch. The tick is the pass's clock time truncated to the decay interval, so a second beat or a
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


def tick_of(now: datetime, interval_s: float) -> datetime:
    seconds = int(now.timestamp() // interval_s * interval_s)
    return datetime.fromtimestamp(seconds, UTC)


def batches(sizes: list[tuple[str, int]], limit: int) -> list[list[str]]:
    """Users grouped into batches of about `limit` memories (a bigger user is a batch alone):
    one huge user cannot hold everyone else's batch hostage, and no batch is unbounded by
    more than one user's size."""
    out: list[list[str]] = []
    current: list[str] = []
    held = 0
    for user_id, count in sizes:
        if current and held + count > limit:
            out.append(current)
            current, held = [], 0
        current.append(user_id)
        held += count
    if current:
        out.append(current)
    return out


def decay_tenant(settings: Settings, tenant_id: str, tick: datetime) -> tuple[int, int] | None:
    """(rows decayed, rows archived) for one tenant at `tick`; None if another run has it."""
    with run_job("decay", tenant_id, tick=tick) as run:
        if run is None:
            return None
        with unit_of_work(tenant_id) as session:
            sizes = decay_sql.user_sizes(session=session, tenant_id=tenant_id)
        archived = 0
        for users in batches(sizes, settings.decay_batch):
            with unit_of_work(tenant_id) as session:
                batch = decay_sql.decay_batch(
                    session=session,
                    tenant_id=tenant_id,
                    users=users,
                    tick=tick,
                    base_days=settings.decay_half_life_days,
                    floor=settings.decay_floor,
                )
            run.rows += batch.rows
            archived += batch.archived
            run.detail["archived"] = archived
        return run.rows, archived


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
