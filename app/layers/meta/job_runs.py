"""SQL for meta.job_runs: a periodic job's runs, their progress and their outcome. Never
commits; under the run's tenant scope (or the owner's, to read every tenant's)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session


def start(
    *,
    session: Session,
    run_id: uuid.UUID,
    tenant_id: str,
    job: str,
    scope: str,
    tick: datetime | None,
) -> None:
    session.execute(
        text(
            "INSERT INTO meta.job_runs (id, tenant_id, job, scope, tick)"
            " VALUES (:id, :tenant, :job, :scope, :tick)"
        ),
        {"id": run_id, "tenant": tenant_id, "job": job, "scope": scope, "tick": tick},
    )


def progress(*, session: Session, run_id: uuid.UUID, rows: int, detail: dict[str, Any]) -> None:
    """Commit a running job's position with the batch it finished (resumable after a crash)."""
    session.execute(
        text(
            "UPDATE meta.job_runs SET rows = :rows, detail = CAST(:detail AS jsonb) WHERE id = :id"
        ),
        {"id": run_id, "rows": rows, "detail": json.dumps(detail, default=str)},
    )


def finish(
    *,
    session: Session,
    run_id: uuid.UUID,
    status: str,
    rows: int,
    errors: int,
    detail: dict[str, Any],
    error: str | None,
) -> None:
    session.execute(
        text(
            "UPDATE meta.job_runs SET status = :status, rows = :rows, errors = :errors,"
            " detail = CAST(:detail AS jsonb), error = :error, finished_at = now()"
            " WHERE id = :id"
        ),
        {
            "id": run_id,
            "status": status,
            "rows": rows,
            "errors": errors,
            "detail": json.dumps(detail, default=str),
            "error": error[:4000] if error else None,
        },
    )


def earlier_at_tick(
    *, session: Session, tenant_id: str, job: str, tick: datetime, run_id: uuid.UUID
) -> list[Any]:
    """Other runs of the job for the same tick, newest first (did one finish, where did one
    stop)."""
    return list(
        session.execute(
            text(
                "SELECT status, detail FROM meta.job_runs"
                " WHERE tenant_id = :tenant AND job = :job AND tick = :tick AND id <> :id"
                " AND started_at >= :tick ORDER BY started_at DESC"
            ),
            {"tenant": tenant_id, "job": job, "tick": tick, "id": run_id},
        )
    )


def recent(*, session: Session, limit: int) -> list[Any]:
    """The latest runs of jobs; `beat:<entry>` rows (when each beat entry last ran, kept so
    a second beat skips it) are bookkeeping, not work, and would fill the list."""
    return list(
        session.execute(
            text(
                "SELECT job, tenant_id, scope, status, rows, errors, started_at, finished_at,"
                " error, detail FROM meta.job_runs WHERE job NOT LIKE 'beat:%'"
                " ORDER BY started_at DESC LIMIT :limit"
            ),
            {"limit": limit},
        )
    )
