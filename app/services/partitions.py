"""Day partitions of the tables that age out (app/db/partitions.py), kept by their retention
jobs: before its row deletes, each job makes sure a partition exists for every day from its
cutoff to a week ahead and drops the ones wholly past the cutoff.

The partitions hold every tenant's rows, so this runs once per job run for the whole
database, as the schema owner, each partition's DDL in its own short transaction.
"""

from __future__ import annotations

from datetime import datetime

from app.config import Settings
from app.db import partitions
from app.db.session import app_engine, owner_engine, unit_of_work
from app.services.jobs import ALL_TENANTS, run_job

PARTITIONS_JOB = "db.partitions"


def keep_day_partitions(
    settings: Settings, spec: partitions.DailyPartitions, *, keep_from: datetime, now: datetime
) -> int | None:
    """Create the missing day partitions of `spec` up to AHEAD_DAYS after `now`, drop the
    ones wholly before `keep_from`; returns how many partitions changed (None when another
    run holds the job)."""
    engine = app_engine(settings)
    with run_job(PARTITIONS_JOB, ALL_TENANTS, scope=spec.table, engine=engine) as run:
        if run is None:
            return None
        with unit_of_work(engine=owner_engine(settings)) as session:
            todo = partitions.plan(session, spec, keep_from=keep_from, now=now)
        moved = 0
        for day in todo.create:
            with unit_of_work(engine=owner_engine(settings)) as session:
                moved += partitions.create_partition(session, spec, day)
        for name in todo.drop:
            with unit_of_work(engine=owner_engine(settings)) as session:
                partitions.drop_partition(session, spec, name)
        run.rows = len(todo.create) + len(todo.drop)
        run.detail.update(
            created=[spec.partition(day) for day in todo.create],
            dropped=todo.drop,
            moved_from_default=moved,
        )
        return run.rows
