"""What an operator asks first: how deep are the streams, what is pending, what is dead, how
many rows does each layer hold."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from sqlalchemy import Engine, text

from app.config import Settings
from app.keys import RedisKeys

LAYER_TABLES = (
    ("L1", "working.summaries"),
    ("L2", "episodic.sessions"),
    ("L2", "episodic.turns"),
    ("L2", "episodic.events"),
    ("L3", "semantic.memories"),
    ("L3", "semantic.extraction_batches"),
    ("L4", "conceptual.entities"),
    ("L4", "conceptual.relations"),
    ("L4", "conceptual.mentions"),
    ("L4", "conceptual.associations"),
    ("L5", "meta.access_patterns"),
    ("L5", "meta.procedures"),
)


# Entries counted one by one after the last delivery when Redis does not report a group's lag
# (Redis 6, or deletions past the last delivery): such a lag reads at most this. Bounded so a
# scrape every few seconds never reads a deep backlog whole.
LAG_SCAN_LIMIT = 1000


@dataclass(frozen=True)
class PartitionStatus:
    stream: str
    length: int
    pending: int
    lag: int | None
    consumers: int
    # Age of the oldest entry delivered and not acked (from its id, Redis' clock); None if none.
    oldest_pending_s: float | None = None


@dataclass(frozen=True)
class StreamStatus:
    partitions: list[PartitionStatus]
    dead_letters: int
    dead_tasks: int
    lost: int
    working_users: int
    consumers: list[dict[str, str]]

    @property
    def total_length(self) -> int:
        return sum(p.length for p in self.partitions)

    @property
    def total_pending(self) -> int:
        return sum(p.pending for p in self.partitions)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _id_ms(entry_id: bytes | str) -> int:
    return int(_text(entry_id).split("-", 1)[0])


def stream_status(
    client: redis.Redis, settings: Settings, *, consumers: bool = True
) -> StreamStatus:
    """Every partition's length, pending entries, lag and oldest pending age, with a few
    round trips whatever the partition count. `consumers` also lists the live consumers'
    heartbeats, which takes a SCAN of the keyspace: `engram status` wants it, a scrape every
    few seconds does not."""
    keys = RedisKeys.from_settings(settings)
    streams = keys.partitions(settings.stream_partitions)
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xlen(stream)
        pipe.xinfo_groups(stream)
        pipe.xpending(stream, settings.consumer_group)
    pipe.time()
    replies = pipe.execute(raise_on_error=False)
    seconds, micros = replies[-1]
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    parts = []
    for index, stream in enumerate(streams):
        length, groups, summary = replies[3 * index : 3 * index + 3]
        parts.append(_partition(client, settings, stream, int(length), groups, summary, now_ms))
    live = []
    if consumers:
        for key in sorted(client.scan_iter(match=keys.consumer_heartbeats(), count=1000)):
            fields = {_text(k): _text(v) for k, v in client.hgetall(key).items()}
            if fields:
                live.append(fields)
    pipe = client.pipeline(transaction=False)
    pipe.xlen(keys.dead_letters())
    pipe.xlen(keys.dead_tasks())
    pipe.get(keys.lost_entries())
    pipe.zcard(keys.working_active())
    dead_letters, dead_tasks, lost, working = pipe.execute()
    return StreamStatus(
        partitions=parts,
        dead_letters=int(dead_letters),
        dead_tasks=int(dead_tasks),
        lost=int(lost or 0),
        working_users=int(working),
        consumers=live,
    )


def _partition(
    client: redis.Redis,
    settings: Settings,
    stream: str,
    length: int,
    groups: Any,
    summary: Any,
    now_ms: int,
) -> PartitionStatus:
    """One partition from its XINFO GROUPS and XPENDING replies (errors where the stream or
    the group does not exist yet: then every entry waits, none is pending)."""
    if isinstance(groups, Exception) or isinstance(summary, Exception):
        return PartitionStatus(stream, length, 0, length, 0)
    group = next((g for g in groups if _text(g["name"]) == settings.consumer_group), None)
    if group is None:
        return PartitionStatus(stream, length, 0, length, 0)
    pending = int(group["pending"])
    oldest = summary.get("min")
    age = max(0, now_ms - _id_ms(oldest)) / 1000 if pending and oldest else None
    return PartitionStatus(
        stream,
        length,
        pending,
        _lag(client, stream, group),
        int(group["consumers"]),
        age,
    )


def _lag(client: redis.Redis, stream: str, group: dict[str, Any]) -> int:
    """Entries not yet delivered to the group: as Redis reports it, or counted (bounded by
    LAG_SCAN_LIMIT) after the last delivered id when it cannot tell."""
    lag = group.get("lag")
    if lag is not None:
        return int(lag)
    after = "(" + _text(group["last-delivered-id"])
    return len(client.xrange(stream, min=after, max="+", count=LAG_SCAN_LIMIT))


def ingest_lag_samples(client: redis.Redis, settings: Settings, count: int) -> list[float]:
    """The last `count` XADD-to-ack delays in seconds, as consumers recorded them."""
    key = RedisKeys.from_settings(settings).ingest_lag()
    return [int(v) / 1000 for v in client.lrange(key, -count, -1)]


def layer_row_counts(engine: Engine) -> list[tuple[str, str, int]]:
    """Exact counts across tenants: an operator's view, so it runs on the owner's engine."""
    with engine.connect() as conn:
        return [
            (layer, table, int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()))  # noqa: S608
            for layer, table in LAYER_TABLES
        ]


def extraction_states(engine: Engine) -> dict[str, int]:
    """Extraction batches per state across tenants (operator view, owner's engine)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT state, count(*) FROM semantic.extraction_batches GROUP BY state")
        )
        return {state: int(n) for state, n in rows}


def extraction_backlog(engine: Engine) -> dict[str, int]:
    """Turns across tenants still waiting for extraction (operator view, owner's engine):
    `unscored` have no salience yet, `unclaimed` are scored and in no batch. Each count reads
    one of the partial indexes kept for exactly these turns."""
    with engine.connect() as conn:
        unscored = conn.execute(
            text("SELECT count(*) FROM episodic.turns WHERE salience IS NULL")
        ).scalar_one()
        unclaimed = conn.execute(
            text(
                "SELECT count(*) FROM episodic.turns"
                " WHERE extraction_batch_id IS NULL AND salience IS NOT NULL"
            )
        ).scalar_one()
    return {"unscored": int(unscored), "unclaimed": int(unclaimed)}


@dataclass(frozen=True)
class JobRunCount:
    job: str
    status: str
    runs: int
    last_started_at: datetime


def job_run_counts(engine: Engine) -> list[JobRunCount]:
    """Runs on record per job and status across tenants (operator view, owner's engine),
    kept for ENGRAM_JOB_RUNS_RETENTION_DAYS; `beat:*` rows are the beat's bookkeeping, not
    work, and are left out as `engram status` leaves them out."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT job, status, count(*), max(started_at) FROM meta.job_runs"
                " WHERE job NOT LIKE 'beat:%' GROUP BY job, status ORDER BY job, status"
            )
        )
        return [JobRunCount(job, status, int(n), last) for job, status, n, last in rows]
