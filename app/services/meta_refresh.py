"""L5 upkeep: refresh the hot-memories view, prune old access patterns, recompute procedure
confidence.

Every job runs under `run_job`, so two beats, a retried task or two workers starting the same
job at once do the work once (the second start is skipped and says so), and every run is a
row in meta.job_runs. Beat's firings are also spaced by their period (workers/base.py), so
two beats firing the scheduled refresh one after the other run it once per period. The
refresh spans the whole database (tenant `*`) and runs as the owner of the view; the other
two run tenant by tenant, each inside that tenant's row-level security scope, so a bug in
one statement can never touch another tenant's rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.config import Settings
from app.db.session import app_engine, owner_engine, unit_of_work
from app.layers.meta import maintenance
from app.services.jobs import ALL_TENANTS, JobRun, drain, each_tenant, run_job
from app.services.partitions import keep_day_partitions

_log = logging.getLogger(__name__)

REFRESH_JOB = "meta.refresh"
PRUNE_JOB = "meta.prune_access"
PROCEDURES_JOB = "meta.procedures"
PRUNE_BATCH = 50_000


@dataclass(frozen=True)
class RefreshResult:
    """A refresh that ran: rows now in the view, and how long the refresh took."""

    rows: int
    duration_s: float


def refresh_hot_memories(settings: Settings, *, reason: str = "schedule") -> RefreshResult | None:
    """REFRESH MATERIALIZED VIEW CONCURRENTLY meta.hot_memories_mv, as its owner.

    Readers of meta.hot_memories keep reading the previous contents while it runs. Returns
    None when another refresh holds the job (it is doing the same work)."""
    return _refresh(settings, unless=None, reason=lambda: reason)


def maybe_refresh_after_ingest(settings: Settings) -> RefreshResult | None:
    """Refresh when at least `meta_refresh_after_memories` memories were created since the
    start of the last successful refresh (or ever, with none); else None.

    The count is taken under the refresh's lock, so two callers that both see the threshold
    reached refresh once: the second counts again after the first and finds nothing new.
    Cheap enough to call often: the count stops at the threshold."""
    threshold = settings.meta_refresh_after_memories
    counted = [0]

    def not_due() -> str | None:
        with unit_of_work(engine=owner_engine(settings)) as session:
            since = maintenance.last_finished_run(
                session=session, job=REFRESH_JOB, tenant_id=ALL_TENANTS
            )
            counted[0] = maintenance.memories_created_since(
                session=session, since=since, limit=threshold
            )
        if counted[0] < threshold:
            return f"{counted[0]} new memories, {threshold} needed"
        return None

    return _refresh(settings, unless=not_due, reason=lambda: f"{counted[0]}+ new memories")


def _refresh(
    settings: Settings,
    *,
    unless: Callable[[], str | None] | None,
    reason: Callable[[], str],
) -> RefreshResult | None:
    with run_job(REFRESH_JOB, ALL_TENANTS, engine=app_engine(settings), unless=unless) as run:
        if run is None:
            return None
        started = time.monotonic()
        with unit_of_work(engine=owner_engine(settings)) as session:
            rows = maintenance.refresh_hot_memories(session=session)
        duration = time.monotonic() - started
        run.rows = rows
        run.detail.update(duration_ms=round(duration * 1000, 1), reason=reason())
        return RefreshResult(rows=rows, duration_s=duration)


def prune_access_patterns(
    settings: Settings, now: datetime | None = None, *, batch: int = PRUNE_BATCH
) -> int:
    """Delete access patterns older than `access_retention_days`: whole day partitions past
    the cutoff first (and partitions ahead made), then tenant by tenant, at most `batch` rows
    per transaction; returns how many rows went one by one."""
    now = now or datetime.now(UTC)
    before = now - timedelta(days=settings.access_retention_days)
    keep_day_partitions(settings, maintenance.ACCESS_PARTITIONS, keep_from=before, now=now)

    def prune(tenant_id: str, run: JobRun) -> None:
        run.detail["before"] = before.isoformat()
        drain(
            settings,
            tenant_id,
            run,
            batch,
            lambda session: maintenance.prune_access_patterns(
                session=session, tenant_id=tenant_id, before=before, limit=batch
            ),
        )

    return each_tenant(PRUNE_JOB, settings, now, prune)


def prune_job_runs(
    settings: Settings, now: datetime | None = None, *, batch: int = PRUNE_BATCH
) -> int:
    """Forget finished job runs older than `job_runs_retention_days` (the per-minute jobs
    write a row per tenant and run); returns how many went."""
    before = (now or datetime.now(UTC)) - timedelta(days=settings.job_runs_retention_days)
    total = 0
    while True:
        with unit_of_work(engine=owner_engine(settings)) as session:
            deleted = maintenance.prune_job_runs(session=session, before=before, limit=batch)
        total += deleted
        if deleted < batch:
            return total


def recompute_procedure_confidence(settings: Settings, now: datetime | None = None) -> int:
    """Rewrite every stored procedure confidence from its avg_success and executions with the
    current formula (after the formula changed, or rows were written by hand); one UPDATE
    per tenant. Returns how many rows changed; a second run returns 0."""

    def recompute(tenant_id: str, run: JobRun) -> None:
        with unit_of_work(tenant_id, engine=app_engine(settings)) as session:
            run.rows = maintenance.recompute_confidence(session=session, tenant_id=tenant_id)

    return each_tenant(PROCEDURES_JOB, settings, now or datetime.now(UTC), recompute)
