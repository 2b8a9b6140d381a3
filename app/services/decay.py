"""The decay pass (beat, hourly): every tenant, in bounded batches, one transaction each.

Batches are page ranges of about ENGRAM_DECAY_BATCH memories, one transaction each. The tick
is the pass's clock time truncated to the decay interval, so a second beat or a
retried task in the same interval works on the same tick: rows the first run reached are
skipped, a crashed run resumes where it stopped, and nothing decays twice.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from app.config import Settings
from app.db.session import owner_engine, unit_of_work
from app.layers.semantic import decay as decay_sql
from app.services.jobs import ALL_TENANTS, run_job, tick_of

_log = logging.getLogger(__name__)


def decay_pass(
    settings: Settings, tick: datetime, *, tenant_id: str | None = None
) -> tuple[int, int] | None:
    """(rows decayed, rows archived) at `tick`; None if another pass holds the job.

    A cross-tenant maintenance pass, run as the schema owner like the view refresh: it reads
    and returns no tenant's data, applies one formula to every live row, and walks each heap
    (the partitions') in page ranges so that each page is visited once per pass (tenants'
    rows share pages; a pass per tenant would read the whole heap once per tenant).
    `tenant_id` limits it to one tenant (on demand)."""
    scope = tenant_id or ALL_TENANTS
    with run_job("decay", scope, tick=tick, engine=owner_engine()) as run:
        if run is None:
            return None
        with unit_of_work(engine=owner_engine()) as session:
            heaps = decay_sql.heaps(session=session)
        archived = 0
        for heap in heaps:
            per_page = heap.rows_per_page
            step = max(1, int(settings.decay_batch / per_page)) if per_page else 1000
            for first in range(0, heap.pages, step):
                with unit_of_work(engine=owner_engine()) as session:
                    batch = decay_sql.decay_pages(
                        session=session,
                        heap=heap.relation,
                        first_page=first,
                        end_page=first + step,
                        tick=tick,
                        base_days=settings.decay_half_life_days,
                        floor=settings.decay_floor,
                        tenant_id=tenant_id,
                    )
                run.rows += batch.rows
                archived += batch.archived
                run.detail["archived"] = archived
        run.detail["pages"] = sum(heap.pages for heap in heaps)
        return run.rows, archived


def run_decay(settings: Settings, *, now: datetime | None = None) -> int:
    """One pass (beat, hourly); returns the rows decayed (0 when another pass has it)."""
    done = decay_pass(settings, tick_of(now or datetime.now(UTC), settings.decay_interval_s))
    return done[0] if done else 0


def restore_memories(
    settings: Settings, tenant_id: str, ids: list[uuid.UUID], *, now: datetime | None = None
) -> list[uuid.UUID]:
    """Archived memories back into search; returns the ids that were archived."""
    with unit_of_work(tenant_id, all_agents=True) as session:
        return decay_sql.restore(
            session=session,
            ids=ids,
            importance=settings.restore_importance,
            now=now or datetime.now(UTC),
        )
