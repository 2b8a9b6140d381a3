"""SQL for L5 upkeep: the hot-memories refresh, access-pattern pruning, procedure confidence.

Set-based; never commits. The refresh and the "memories since" count span every tenant and
run as the schema owner; pruning and the confidence recompute run under one tenant's
row-level security scope (the caller's unit of work) and name the tenant as well, so the
planner can use the tenant's indexes.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db.partitions import DailyPartitions
from app.layers.meta.procedures import confidence_sql

# Access records are partitioned by the day they were recorded: whole days past the retention
# window go with their partition (app/services/partitions.py), the rest row by row below.
ACCESS_PARTITIONS = DailyPartitions("meta.access_patterns", "created_at")

_IS_POPULATED = text(
    "SELECT c.relispopulated FROM pg_class AS c WHERE c.oid = to_regclass('meta.hot_memories_mv')"
)
# CONCURRENTLY takes an EXCLUSIVE lock: readers (ACCESS SHARE) go on reading the old contents
# until the refresh commits; a second refresh waits. It diffs the new result against the old
# one by the unique index on memory_id, and may run inside a transaction block.
_REFRESH_CONCURRENTLY = text("REFRESH MATERIALIZED VIEW CONCURRENTLY meta.hot_memories_mv")
# Only for a view left unpopulated (restored WITH NO DATA): CONCURRENTLY refuses one, and
# nobody can read it until this runs anyway.
_REFRESH_BLOCKING = text("REFRESH MATERIALIZED VIEW meta.hot_memories_mv")
_COUNT_HOT = text("SELECT count(*) FROM meta.hot_memories_mv")


def refresh_hot_memories(*, session: Session) -> int:
    """Recompute meta.hot_memories_mv without blocking its readers; returns its row count.

    Needs the view's owner (the migration role)."""
    populated = session.execute(_IS_POPULATED).scalar_one_or_none()
    session.execute(_REFRESH_CONCURRENTLY if populated else _REFRESH_BLOCKING)
    return int(session.execute(_COUNT_HOT).scalar_one())


def last_finished_run(*, session: Session, job: str, tenant_id: str) -> datetime | None:
    """When the latest successful run of `job` for `tenant_id` started (None: never)."""
    value: datetime | None = session.execute(
        text(
            "SELECT max(started_at) FROM meta.job_runs"
            " WHERE job = :job AND tenant_id = :tenant AND status = 'done'"
        ),
        {"job": job, "tenant": tenant_id},
    ).scalar_one()
    return value


def memories_created_since(*, session: Session, since: datetime | None, limit: int) -> int:
    """Memories (of every tenant the session sees) created after `since`, counted up to
    `limit`: the caller only asks whether a threshold is reached, so the scan stops there."""
    return int(
        session.execute(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM semantic.memories"
                " WHERE CAST(:since AS timestamptz) IS NULL OR created_at > :since"
                " LIMIT :limit) AS new_memories"
            ),
            {"since": since, "limit": max(int(limit), 0)},
        ).scalar_one()
    )


_PRUNE_ACCESS = text(
    "DELETE FROM meta.access_patterns WHERE id IN ("
    " SELECT id FROM meta.access_patterns WHERE tenant_id = :tenant AND created_at < :before"
    " LIMIT :limit)"
)


def prune_access_patterns(*, session: Session, tenant_id: str, before: datetime, limit: int) -> int:
    """Delete at most `limit` of the tenant's access patterns recorded before `before`;
    returns how many went. The caller repeats (one transaction each) until fewer than
    `limit` go, so no statement holds many row locks or a long transaction."""
    result = session.execute(
        _PRUNE_ACCESS, {"tenant": tenant_id, "before": before, "limit": int(limit)}
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


# NaN counts as 0, as in the Python formula (PostgreSQL orders NaN above every number, so
# GREATEST/LEAST alone would clamp it to 1).
_CONFIDENCE = confidence_sql(
    "CASE WHEN p.avg_success = CAST('NaN' AS float8) THEN 0 ELSE p.avg_success END",
    "p.executions",
)
# Built from constant expressions, never from input. Rows already holding the formula's value
# are left alone, so a second run writes nothing and the count is of rows really changed.
_RECOMPUTE_CONFIDENCE = text(
    f"UPDATE meta.procedures AS p SET confidence = {_CONFIDENCE}"  # noqa: S608
    f" WHERE p.tenant_id = :tenant AND p.confidence IS DISTINCT FROM {_CONFIDENCE}"
)


def recompute_confidence(*, session: Session, tenant_id: str) -> int:
    """Set every procedure's confidence of the tenant from its avg_success and executions
    with the formula record_outcome uses; returns how many rows changed."""
    result = session.execute(_RECOMPUTE_CONFIDENCE, {"tenant": tenant_id})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


_PRUNE_RUNS = text(
    "DELETE FROM meta.job_runs WHERE id IN (SELECT id FROM meta.job_runs"
    " WHERE finished_at < :before LIMIT :limit)"
)


def prune_job_runs(*, session: Session, before: datetime, limit: int) -> int:
    """Delete at most `limit` finished job runs older than `before` (every tenant's: run as
    the owner, it is operational history, not tenant data); returns how many went."""
    result = session.execute(_PRUNE_RUNS, {"before": before, "limit": int(limit)})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
