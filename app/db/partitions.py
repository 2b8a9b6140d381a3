"""Daily range partitions of the tables that grow with every event and age out.

episodic.events (by `occurred_at`) and meta.access_patterns (by `created_at`) hold one
partition per UTC day plus a DEFAULT partition, so an insert never fails whatever its time
(the tenant_keys_and_partitions migration). Their retention jobs keep, as the schema owner,
a partition for every day from the retention cutoff to AHEAD_DAYS ahead, and drop the ones
wholly older than the cutoff: one statement instead of a day of row deletes, and no dead rows
left for vacuum. Rows the default partition already holds for a new day (a time far ahead,
or a day back inside the window after the retention grew) move into the new partition.

Names and bounds follow one rule, `<table>_pYYYYMMDD` for [day, day + 1) in UTC, which the
migration follows too. Table and column come from the layers' own constants, never from input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session

AHEAD_DAYS = 7
# A partition's DDL waits this long for its table lock, then fails (and the next run
# retries): queued behind a long transaction it would otherwise hold up every insert.
LOCK_TIMEOUT = "5s"
_DAY_SUFFIX = re.compile(r"_p(\d{8})$")


@dataclass(frozen=True)
class DailyPartitions:
    """A table range-partitioned by day on `column` (a timestamptz)."""

    table: str
    column: str

    @property
    def schema(self) -> str:
        return self.table.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.table.split(".", 1)[1]

    @property
    def default(self) -> str:
        return f"{self.table}_default"

    def partition(self, day: date) -> str:
        return f"{self.table}_p{day:%Y%m%d}"


def day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, UTC)


def days_held(session: Session, spec: DailyPartitions) -> dict[date, str]:
    """day → partition, for the day partitions the table has now."""
    rows = session.execute(
        text(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = CAST(:table AS regclass)"
        ),
        {"table": spec.table},
    ).scalars()
    held = {}
    for name in rows:
        found = _DAY_SUFFIX.search(name)
        if found:
            day = datetime.strptime(found.group(1), "%Y%m%d").date()
            held[day] = f"{spec.schema}.{name}"
    return held


@dataclass(frozen=True)
class Plan:
    create: list[date]
    drop: list[str]


def plan(session: Session, spec: DailyPartitions, *, keep_from: datetime, now: datetime) -> Plan:
    """The days missing between `keep_from`'s day and AHEAD_DAYS after `now`'s, and the
    partitions whose whole day lies before `keep_from`."""
    held = days_held(session, spec)
    first, last = keep_from.astimezone(UTC).date(), now.astimezone(UTC).date()
    last += timedelta(days=AHEAD_DAYS)
    wanted = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    return Plan(
        create=[day for day in wanted if day not in held],
        drop=[
            name
            for day, name in sorted(held.items())
            if day_start(day + timedelta(days=1)) <= keep_from
        ],
    )


def create_partition(session: Session, spec: DailyPartitions, day: date) -> int:
    """Add the day's partition; returns how many rows it took over from the default one."""
    session.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    bounds = {"lo": day_start(day), "hi": day_start(day + timedelta(days=1))}
    partition, column = spec.partition(day), spec.column
    waiting = session.execute(
        text(
            f"SELECT EXISTS (SELECT 1 FROM {spec.default}"  # noqa: S608
            f" WHERE {column} >= :lo AND {column} < :hi)"
        ),
        bounds,
    ).scalar()
    values = f"FOR VALUES FROM ('{bounds['lo'].isoformat()}') TO ('{bounds['hi'].isoformat()}')"
    if not waiting:
        session.execute(text(f"CREATE TABLE {partition} PARTITION OF {spec.table} {values}"))
        return 0
    # The default partition may not keep rows of a partition's range: they move first, into
    # a plain table that is then attached (which builds its indexes and checks its rows).
    session.execute(
        text(
            f"CREATE TABLE {partition} (LIKE {spec.table}"
            " INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION)"
        )
    )
    moved = session.execute(
        text(
            f"WITH moved AS (DELETE FROM {spec.default}"  # noqa: S608
            f" WHERE {column} >= :lo AND {column} < :hi RETURNING *)"
            f" INSERT INTO {partition} SELECT * FROM moved"
        ),
        bounds,
    ).rowcount
    session.execute(text(f"ALTER TABLE {spec.table} ATTACH PARTITION {partition} {values}"))
    return int(moved or 0)


def drop_partition(session: Session, spec: DailyPartitions, partition: str) -> None:
    """Drop one of the table's day partitions, rows and all."""
    if partition not in days_held(session, spec).values():
        raise ValueError(f"partition: {partition} is not a day partition of {spec.table}")
    session.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    session.execute(text(f"DROP TABLE {partition}"))
