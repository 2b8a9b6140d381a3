"""One user's cycle: plan, consolidate (one transaction), ack, then graph analytics (the next
transaction). Split so that a run stopped anywhere is completed by running the cycle again,
and a dry run shares every statement with the real one but rolls back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import redis
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings, get_settings
from app.db.session import app_engine, set_agent, set_tenant, unit_of_work
from app.keys import DreamKeys
from app.layers.semantic import dream as dream_sql
from app.redis_client import get_redis
from app.scoring.replay import ReplayCandidate, order_replays
from app.services import graph_analytics
from app.services.dream_consolidation import consolidate
from app.services.dream_identity import cycle_id_for, cycle_window, window_start
from app.services.dream_replay import candidates, covered, xadd_replays
from app.services.dream_reports import CycleReport
from app.services.dream_routing import ack, as_text, peek_entries, pending_entries

EXPLICIT_COOLDOWN_CYCLES = 4
PENDING_PER_BATCH = 5  # entries read per cycle: this many times ENGRAM_DREAM_BATCH


@contextmanager
def _transaction(tenant_id: str, *, commit: bool) -> Iterator[Session]:
    """unit_of_work, or (commit=False) the same transaction rolled back at the end."""
    if commit:
        with unit_of_work(tenant_id, all_agents=True) as session:
            yield session
        return
    factory = sessionmaker(bind=app_engine(get_settings()), expire_on_commit=False)
    with factory() as session:
        session.begin()
        try:
            set_tenant(session, tenant_id)
            set_agent(session, all_agents=True)
            yield session
        finally:
            session.rollback()


def plan_cycle(
    settings: Settings,
    tenant_id: str,
    user_id: str,
    *,
    cycle_id: uuid.UUID | None = None,
    dry_run: bool = True,
    client: redis.Redis | None = None,
    now: datetime | None = None,
) -> CycleReport:
    """Plan one user's cycle and (dry_run=False) commit its consolidation transaction.

    dry_run=True: everything, graph analytics included, runs in a transaction that is rolled
    back and the salience stream is only read: the report is the plan, nothing is written.
    dry_run=False: replays go to the dream stream and the consolidation commits; the report's
    `covered` entries are NOT acked and the graph is not analysed here (`run_cycle` does
    both), so a run that stops after this is completed by running the cycle again."""
    now = now or datetime.now(UTC)
    client = client or get_redis(settings)
    keys = DreamKeys.from_settings(settings)
    window = cycle_window(now, settings.dream_interval_s)
    cycle_id = cycle_id or cycle_id_for(tenant_id, user_id, window)
    report = CycleReport(tenant_id=tenant_id, user_id=user_id, cycle_id=cycle_id, dry_run=dry_run)
    limit = settings.dream_batch * PENDING_PER_BATCH
    entries = (
        peek_entries(client, keys, tenant_id, user_id, limit)
        if dry_run
        else pending_entries(client, keys, tenant_id, user_id, limit)
    )
    report.entries = len(entries)
    with _transaction(tenant_id, commit=not dry_run) as session:
        params = {"session": session, "tenant_id": tenant_id, "user_id": user_id}
        done = dream_sql.receipts(session=session, cycle_id=cycle_id)
        turns: dict[uuid.UUID, list[dream_sql.TurnMemory]] = {}
        for row in dream_sql.memories_of_turns(
            **params, turn_ids=sorted({e.turn_id for e in entries}, key=str)
        ):
            turns.setdefault(row.turn_id, []).append(row)
        if done:
            report.already_done = True
            replayed = done
        else:
            since = window_start(window, settings.dream_interval_s) - timedelta(
                seconds=settings.dream_interval_s * (EXPLICIT_COOLDOWN_CYCLES - 1)
            )
            explicit = [
                ReplayCandidate(
                    memory_id=c.memory_id,
                    kind=c.kind,
                    emotional_intensity=c.emotional_intensity,
                    occurred_at=c.occurred_at,
                    tags=c.tags,
                    source="explicit",
                )
                for c in dream_sql.explicit_candidates(
                    **params, since=since, limit=settings.dream_batch
                )
            ]
            ranked = order_replays(
                [*candidates(entries, turns), *explicit], now, settings.dream_batch
            )
            if not dry_run:
                xadd_replays(client, keys, tenant_id, user_id, cycle_id, ranked)
            replayed = consolidate(session, settings, report, ranked, now)
        report.covered = covered(entries, turns, replayed, now)
        if dry_run:
            report.analytics = graph_analytics.analyse(
                session, settings, tenant_id, user_id, now=now
            )
    return report


def run_cycle(
    settings: Settings,
    tenant_id: str,
    user_id: str,
    *,
    cycle_id: uuid.UUID | None = None,
    dry_run: bool = False,
    client: redis.Redis | None = None,
    now: datetime | None = None,
) -> CycleReport:
    """One user's whole cycle: consolidation (one transaction), ack of the entries it
    consumed, then graph analytics (next transaction). Callers hold the user's dream job
    lock (see run_dream); dry_run=True is plan_cycle's dry run."""
    now = now or datetime.now(UTC)
    client = client or get_redis(settings)
    report = plan_cycle(
        settings,
        tenant_id,
        user_id,
        cycle_id=cycle_id,
        dry_run=dry_run,
        client=client,
        now=now,
    )
    if dry_run:
        return report
    keys = DreamKeys.from_settings(settings)
    report.acked = ack(client, keys, tenant_id, user_id, report.covered)
    marker = keys.analysed(tenant_id, user_id)
    if report.already_done and as_text(client.get(marker) or b"") == str(report.cycle_id):
        return report  # this cycle's analytics committed too: nothing left to do
    with unit_of_work(tenant_id, all_agents=True) as session:
        report.analytics = graph_analytics.analyse(session, settings, tenant_id, user_id, now=now)
    client.set(marker, str(report.cycle_id), ex=max(1, int(settings.dream_interval_s * 2)))
    return report
