"""Hebbian association (L4 memory↔memory edges): memories retrieved together strengthen their
edge, edges left unused weaken and are finally pruned.

Recording is on the request path and costs one Redis round trip: the pairs among a search's
(or a context assembly's) top memories are appended to a per-user buffer. Applying is off it,
per tenant under run_job("hebbian.apply") — one holder at a time, so two workers never read
the same records — and per user in batches: LRANGE, sum identical pairs, one upsert in one
transaction, commit, then LTRIM. A crash between the commit and the LTRIM applies that one
batch again when the next run reads it; nothing else is ever applied twice, and a replay
cannot push a weight past 1 (each co-activation only closes part of the gap to 1).

Weakening runs once per tenant and period (a day) under run_job("hebbian.weaken", tick=…):
Hebbian edges not co-activated during the period before the tick lose `hebbian_weaken` of
their weight, and those that fall under `hebbian_floor` are deleted. It walks the tenant's
edges in key order, one bounded batch per transaction, and commits its position with each
batch; a second run for the same tick resumes from there (after a crash) or does nothing
(after a finished run), so each edge is weakened at most once per period.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.conceptual import hebbian as hebbian_sql
from app.layers.conceptual.hebbian import START, Cursor
from app.layers.episodic import repository as episodic
from app.layers.meta import job_runs
from app.scoring.hebbian import pairs
from app.services import pending_buffers
from app.services.ingest import user_lock_key
from app.services.jobs import run_job, tick_of

_log = logging.getLogger(__name__)

APPLY_JOB = "hebbian.apply"
WEAKEN_JOB = "hebbian.weaken"
BUFFER_TTL_S = 7 * 86_400
# Weakening happens once per period (ENGRAM_HEBBIAN_WEAKEN_PERIOD_S; this is its default);
# an edge co-activated within the period before a tick keeps its weight at that tick.
WEAKEN_PERIOD_S = 86_400.0
# Batches per user and apply run, so one very busy user cannot hold the tenant's run forever
# (what is left waits for the next run).
MAX_BATCHES_PER_USER = 10


def buffer_key(keys: RedisKeys, tenant_id: str, user_id: str) -> str:
    """A user's co-activations not yet applied (a list of JSON records). It carries the
    user's `{tenant|user}` tag, so forgetting the user deletes it."""
    return f"{keys.prefix}:hebbian:{{{tenant_id}|{user_id}}}"


def pending_key(keys: RedisKeys) -> str:
    """Set of `tenant|user` members whose co-activation buffer has records to apply."""
    return f"{keys.prefix}:hebbian:pending"


def record_coactivation(
    client: redis.Redis,
    keys: RedisKeys,
    tenant_id: str,
    user_id: str,
    memory_ids: Sequence[uuid.UUID | str],
    source: str,
    *,
    max_pairs: int = 45,
    at: datetime | None = None,
) -> int:
    """Buffer the pairs among `memory_ids` (ranked best first; at most `max_pairs`, drawn from
    the top). Returns the pairs buffered; fewer than two memories buffer nothing."""
    found = pairs([uuid.UUID(str(m)) for m in memory_ids], max_pairs)
    if not found:
        return 0
    index: dict[uuid.UUID, int] = {}
    for a, b in found:
        index.setdefault(a, len(index))
        index.setdefault(b, len(index))
    record = {
        "ids": [str(m) for m in index],
        "pairs": [[index[a], index[b]] for a, b in found],
        "source": source,
        "at": (at or datetime.now(UTC)).isoformat(),
    }
    buffer = buffer_key(keys, tenant_id, user_id)
    pending_buffers.append(
        client,
        buffer=buffer,
        record=json.dumps(record, separators=(",", ":")),
        ttl_s=BUFFER_TTL_S,
        index=pending_key(keys),
        member=f"{tenant_id}|{user_id}",
    )
    return len(found)


@dataclass
class ApplyReport:
    users: int = 0
    records: int = 0
    coactivations: int = 0  # pair firings read from the buffers
    pairs: int = 0  # distinct pairs per batch
    edges: int = 0  # edges written (created or strengthened)
    created: int = 0
    skipped: int = 0  # pairs naming a memory that no longer exists
    unreadable: int = 0  # records that could not be parsed (dropped)
    busy_tenants: int = 0  # tenants whose apply run was held elsewhere (left for later)

    def add(self, other: ApplyReport) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)


def apply_pending(settings: Settings, client: redis.Redis, *, max_users: int = 200) -> ApplyReport:
    """Apply the buffered co-activations of up to `max_users` pending users, one run per
    tenant; see the module docstring for the exactly-once discipline."""
    keys = RedisKeys.from_settings(settings)
    members = client.srandmember(pending_key(keys), max_users) or []
    by_tenant: dict[str, list[str]] = {}
    for raw in members:
        member = raw.decode() if isinstance(raw, bytes) else str(raw)
        tenant_id, _, user_id = member.partition("|")
        by_tenant.setdefault(tenant_id, []).append(user_id)
    report = ApplyReport()
    for tenant_id in sorted(by_tenant):
        with run_job(APPLY_JOB, tenant_id) as run:
            if run is None:
                report.busy_tenants += 1
                continue
            tenant_report = ApplyReport()
            for user_id in sorted(set(by_tenant[tenant_id])):
                buffer = buffer_key(keys, tenant_id, user_id)
                tenant_report.add(_drain(settings, client, buffer, tenant_id, user_id))
                pending_buffers.release_if_empty(
                    client, buffer=buffer, index=pending_key(keys), member=f"{tenant_id}|{user_id}"
                )
            run.rows = tenant_report.edges
            run.detail = asdict(tenant_report)
            report.add(tenant_report)
    return report


def _drain(
    settings: Settings, client: redis.Redis, buffer: str, tenant_id: str, user_id: str
) -> ApplyReport:
    report = ApplyReport(users=1)
    # Records hold at most hebbian_max_pairs pairs each: a batch stays near hebbian_batch.
    per_batch = max(1, settings.hebbian_batch // settings.hebbian_max_pairs)
    for _ in range(MAX_BATCHES_PER_USER):
        items = client.lrange(buffer, 0, per_batch - 1)
        if not items:
            break
        coactivations, firings, bad = aggregate(items)
        with unit_of_work(tenant_id, all_agents=True) as session:
            # The lock forgetting this user (and ingesting for them) takes: a forget waits
            # for this batch or this batch finds the user's memories gone, never a deadlock.
            episodic.lock_users(session=session, keys=[user_lock_key(tenant_id, user_id)])
            applied = hebbian_sql.apply_coactivations(
                session, tenant_id, user_id, coactivations, rate=settings.hebbian_rate
            )
        client.ltrim(buffer, len(items), -1)  # after the commit: a crash replays this batch
        report.records += len(items) - bad
        report.unreadable += bad
        report.coactivations += firings
        report.pairs += applied.pairs
        report.edges += applied.edges
        report.created += applied.created
        report.skipped += applied.skipped
        if len(items) < per_batch:
            break
    return report


def aggregate(
    items: Sequence[bytes | str],
) -> tuple[list[tuple[str, str, int, datetime]], int, int]:
    """Buffered records -> one (a, b, count, latest time) per distinct pair (a < b, canonical
    UUID strings), the pair firings they held, and the records that could not be read
    (dropped, so that one bad record cannot block its buffer)."""
    canonical: dict[str, str] = {}  # each id string checked (and normalised) once per batch
    decoded: list[tuple[datetime, list[tuple[str, str]]]] = []
    bad = 0
    for item in items:
        try:
            record = json.loads(item)
            ids = []
            for raw in record["ids"]:
                if raw not in canonical:
                    canonical[raw] = str(uuid.UUID(raw))
                ids.append(canonical[raw])
            at = datetime.fromisoformat(record["at"])
            at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
            keys = []
            for i, j in record["pairs"]:
                x, y = ids[i], ids[j]
                if x < y:
                    keys.append((x, y))
                elif y < x:
                    keys.append((y, x))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            _log.warning("unreadable co-activation record skipped: %s", exc)
            bad += 1
            continue
        decoded.append((at, keys))
    counts: Counter[tuple[str, str]] = Counter()
    last: dict[tuple[str, str], datetime] = {}
    decoded.sort(key=lambda entry: entry[0])  # oldest first: the latest time is written last
    for at, keys in decoded:
        counts.update(keys)
        last.update(dict.fromkeys(keys, at))
    firings = sum(len(keys) for _, keys in decoded)
    return [(k[0], k[1], n, last[k]) for k, n in counts.items()], firings, bad


@dataclass
class WeakenReport:
    tick: datetime
    scanned: int = 0
    weakened: int = 0
    pruned: int = 0
    batches: int = 0
    skipped: str | None = None  # why nothing was done: "busy" | "done"
    resumed: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def weaken(
    settings: Settings,
    tenant_id: str,
    now: datetime | None = None,
    *,
    period_s: float | None = None,
) -> WeakenReport:
    """Weaken and prune the tenant's stale Hebbian edges once for the period `now` is in
    (ENGRAM_HEBBIAN_WEAKEN_PERIOD_S, a day, unless given)."""
    period_s = period_s or settings.hebbian_weaken_period_s
    tick = tick_of(now or datetime.now(UTC), period_s)
    before = tick - timedelta(seconds=period_s)
    report = WeakenReport(tick=tick)
    with run_job(WEAKEN_JOB, tenant_id, tick=tick) as run:
        if run is None:
            report.skipped = "busy"
            return report
        with unit_of_work(tenant_id, all_agents=True) as session:
            previous = job_runs.earlier_at_tick(
                session=session, tenant_id=tenant_id, job=WEAKEN_JOB, tick=tick, run_id=run.id
            )
        if any(p.status == "done" for p in previous):
            report.skipped = "done"
            run.detail = {"skipped": "this tick is done"}
            return report
        cursor: Cursor = START
        for p in previous:  # newest first: a run that stopped (crashed or failed) part-way
            after = (p.detail or {}).get("after")
            if after:
                cursor = (after[0], uuid.UUID(after[1]), uuid.UUID(after[2]))
                report.resumed = True
                break
        while True:
            with unit_of_work(tenant_id, all_agents=True) as session:
                step = hebbian_sql.weaken_and_prune(
                    session,
                    tenant_id,
                    before,
                    settings.hebbian_weaken,
                    settings.hebbian_floor,
                    settings.hebbian_batch,
                    after=cursor,
                )
                cursor = step.cursor or cursor
                report.batches += 1
                report.scanned += step.scanned
                report.weakened += step.weakened
                report.pruned += step.pruned
                run.rows = report.weakened + report.pruned
                run.detail = {
                    "before": before.isoformat(),
                    "scanned": report.scanned,
                    "weakened": report.weakened,
                    "pruned": report.pruned,
                    "resumed": report.resumed,
                    "after": [cursor[0], str(cursor[1]), str(cursor[2])],
                }
                # The position commits with the batch: a run after a crash resumes exactly.
                job_runs.progress(session=session, run_id=run.id, rows=run.rows, detail=run.detail)
            if not step.more:
                break
        report.detail = run.detail
    return report
