"""Safe scheduling for periodic jobs: one holder per (job, tenant, scope), every run recorded.

Two beats, a retried task or two workers may start the same job at once. Each run takes a
Postgres advisory lock on its (job, tenant, scope) on a connection of its own and holds it
for the whole run — across the run's many batch transactions — so a second starter skips
(and says so) instead of doing the work twice. A crashed worker's connection closes and the
lock goes with it. Each run is a row in meta.job_runs (start, end, rows touched, errors),
which `engram status` and GET /v1/stats show.

The lock only keeps runs apart in time; two beats firing one after the other would still
run a job twice per period. `once_per_period` adds the period: under the lock, a job whose
last successful run started less than `PERIOD_SHARE` of its period ago is skipped, whoever
fired it. Spacing runs (rather than numbering epoch-aligned ticks) keeps a lone beat whose
firings land near a tick boundary from skipping every other period when delivery jitters.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app.config import Settings
from app.db.session import app_engine, owner_engine, unit_of_work
from app.layers.meta import job_runs
from app.layers.meta.maintenance import last_finished_run
from app.layers.meta.repository import list_tenants

_log = logging.getLogger(__name__)

# The tenant of a job that spans the whole database (a materialized view refresh).
ALL_TENANTS = "*"
# A periodic job runs again once this share of its period has passed since its last start:
# a lone beat (period apart, give or take delivery jitter) always gets through, a second
# beat firing within the same period never does.
PERIOD_SHARE = 0.9


def tick_of(now: datetime, period_s: float) -> datetime:
    """The start of the period `now` falls in (periods counted from the epoch, UTC): the
    clock tick a periodic job is idempotent for."""
    return datetime.fromtimestamp(math.floor(now.timestamp() / period_s) * period_s, UTC)


def lock_key(job: str, tenant_id: str, scope: str = "") -> int:
    digest = hashlib.blake2b(f"job\x1f{job}\x1f{tenant_id}\x1f{scope}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


@dataclass
class JobRun:
    """What a running job reports; the context manager writes it to meta.job_runs."""

    id: uuid.UUID
    job: str
    tenant_id: str
    scope: str
    rows: int = 0
    errors: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


@contextmanager
def run_job(
    job: str,
    tenant_id: str,
    *,
    scope: str = "",
    tick: datetime | None = None,
    engine: Engine | None = None,
    unless: Callable[[], str | None] | None = None,
) -> Iterator[JobRun | None]:
    """Yields a JobRun while holding the job's lock, or None when another run holds it or,
    asked under the lock, `unless` gives a reason to skip (then no run is recorded).

    An exception inside marks the run failed (with its message) and propagates."""
    engine = engine or app_engine()
    key = lock_key(job, tenant_id, scope)
    with engine.connect() as lock:
        held = bool(lock.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())
        lock.commit()  # the session-level lock outlives this transaction
        if not held:
            _log.info("job %s for %s/%s is running elsewhere; skipped", job, tenant_id, scope)
            yield None
            return
        try:
            reason = unless() if unless is not None else None
            if reason is not None:
                _log.info("job %s for %s/%s skipped: %s", job, tenant_id, scope, reason)
                yield None
                return
            run = JobRun(id=uuid.uuid4(), job=job, tenant_id=tenant_id, scope=scope)
            with unit_of_work(tenant_id) as session:
                job_runs.start(
                    session=session,
                    run_id=run.id,
                    tenant_id=tenant_id,
                    job=job,
                    scope=scope,
                    tick=tick,
                )
            try:
                yield run
            except Exception as exc:
                _finish(run, "failed", f"{type(exc).__name__}: {exc}")
                raise
            _finish(run, "done", None)
        finally:
            lock.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            lock.commit()


def once_per_period(
    job: str, period_s: float, *, engine: Engine | None = None, now: datetime | None = None
) -> AbstractContextManager[JobRun | None]:
    """`run_job` for a job spanning every tenant, skipped (None) when its last successful run
    started less than PERIOD_SHARE * `period_s` ago: two beats firing it within one period
    run it once. A failed or crashed run does not count, so the next firing retries."""

    def ran_lately() -> str | None:
        with unit_of_work(ALL_TENANTS, engine=engine) as session:
            last = last_finished_run(session=session, job=job, tenant_id=ALL_TENANTS)
        if last is None:
            return None
        age_s = ((now or datetime.now(UTC)) - last).total_seconds()
        if age_s < period_s * PERIOD_SHARE:
            return f"ran {age_s:.1f}s ago, period {period_s:g}s"
        return None

    return run_job(job, ALL_TENANTS, engine=engine, unless=ran_lately)


def _finish(run: JobRun, status: str, error: str | None) -> None:
    with unit_of_work(run.tenant_id) as session:
        job_runs.finish(
            session=session,
            run_id=run.id,
            status=status,
            rows=run.rows,
            errors=run.errors + (1 if error else 0),
            detail=run.detail,
            error=error,
        )


def recent_runs(tenant_id: str | None = None, limit: int = 20) -> list[Any]:
    """The latest runs: of one tenant (under its RLS scope), or of all (as the owner)."""
    if tenant_id is None:
        with unit_of_work(engine=owner_engine()) as session:
            return job_runs.recent(session=session, limit=limit)
    with unit_of_work(tenant_id) as session:
        return job_runs.recent(session=session, limit=limit)


def tenants() -> list[str]:
    """Every registered tenant (the registry carries no RLS), for per-tenant chunking."""
    with unit_of_work() as session:
        return list_tenants(session=session)


def each_tenant(
    job: str, settings: Settings, tick: datetime, work: Callable[[str, JobRun], None]
) -> int:
    """Run `work` for every tenant under the job's lock; rows of all runs that ran.

    One tenant's failure (recorded in its run) does not keep the others waiting for the next
    tick; the first error is raised once every tenant had its turn."""
    total = 0
    failure: Exception | None = None
    for tenant_id in tenants():
        try:
            with run_job(job, tenant_id, tick=tick, engine=app_engine(settings)) as run:
                if run is None:
                    continue
                work(tenant_id, run)
                total += run.rows
        except Exception as exc:
            _log.exception("job %s failed for tenant %s", job, tenant_id)
            failure = failure or exc
    if failure is not None:
        raise failure
    return total


def drain(
    settings: Settings, tenant_id: str, run: JobRun, batch: int, delete: Callable[[Session], int]
) -> None:
    """Repeat `delete` (at most `batch` rows, one transaction each) until it takes fewer:
    bulk deletes never hold one long transaction, and each batch counts in the run."""
    while True:
        with unit_of_work(tenant_id, engine=app_engine(settings)) as session:
            deleted = delete(session)
        run.rows += deleted
        if deleted < batch:
            return
