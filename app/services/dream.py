"""The sleep / dream cycle: replay what attention tagged, consolidate it, analyse the graph.

Flow, per user (each under `run_job("dream", tenant, scope=user)`, so one runs at a time):

1. **Route.** Attention XADDs consolidation winners to the salience stream (one stream for
   every tenant). The consumer group `dream` reads it (XREADGROUP) and files each entry under
   its user (`{prefix}:dream:pending:{tenant|user}`, a hash entry id → fields; the user goes
   into `{prefix}:dream:users`, scored by their oldest entry). Entries stay pending in the
   group until a cycle has committed their effect; a router that died between reading and
   filing has its entries reclaimed (XAUTOCLAIM) by the next run.
2. **Plan.** The user's pending entries resolve to the memories extracted from their turns
   (an entry whose turn has produced no memory yet waits; one whose extraction is over, or
   that is older than STALE_ENTRY_S, is dropped). So that explicit memories consolidate too,
   the user's most salient memories that no cycle replayed in the last
   EXPLICIT_COOLDOWN_CYCLES windows join them. All are ordered by replay priority
   (app/scoring/replay.py) and the first ENGRAM_DREAM_BATCH are replayed into the dream
   stream `{prefix}:dream` (entries carry cycle and memory ids, the key a reader dedupes on).
3. **Consolidate**, in ONE transaction: replay receipts (semantic.replays) are inserted with
   ON CONFLICT DO NOTHING and only the memories whose receipt is new get effects —
   consolidation strength s ← s + 0.1(1 - s) and one more replay; shared-entity and
   close-embedding pairs (cosine ≥ ENGRAM_DREAM_LINK_COSINE) are cross-linked and the edges
   among memories replayed together strengthened (w ← w + η(1 - w), η = ENGRAM_HEBBIAN_RATE);
   tight clusters (connected by cosine ≥ ENGRAM_DREAM_CLUSTER_COSINE, at least
   ENGRAM_DREAM_CLUSTER_MIN memories not yet merged) become one 'consolidated' memory each,
   members kept. Then the entries it covered are acked (XACK) and unfiled.
4. **Graph analytics** (app/services/graph_analytics.py) in the NEXT transaction: PageRank
   into importance, communities into links. It is a fixed point over an unchanged graph, so a
   rerun is harmless; if it fails, the cycle's consolidation stays committed and a rerun of
   the cycle (or the next cycle) analyses the graph again. Once it has committed, the cycle
   is marked analysed (`{prefix}:dream:analysed:{tenant|user}`) and a rerun skips it.

The cycle id is uuid5(tenant, user, window) with window = floor(now / ENGRAM_DREAM_INTERVAL_S):
a crashed and re-run cycle in the same window reuses its receipts. The consolidation
transaction is all or nothing, so a cycle whose receipts exist has done all of it and a rerun
only acks and analyses: killing a run anywhere and re-running gives the state of one clean
run. Later entries of the user wait for the next window's cycle.

`dry_run=True` runs the same statements (graph analytics included, on the would-be state) in
a transaction that is rolled back, reads the stream without consuming it, and returns the plan.

One module per step: dream_routing (1), dream_replay (2), dream_consolidation (3),
dream_cycle (one user's cycle, 2-4), dream_users (who the beat runs for), dream_identity
(cycle ids), dream_reports (what a run returns); the keys are in app/keys.py (DreamKeys).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import redis

from app.config import Settings
from app.keys import DreamKeys
from app.layers.scopes import KNOWLEDGE_USER
from app.redis_client import get_redis
from app.services.dream_consolidation import ENTITY_LINKS_PER_MEMORY, MEMBER_WEIGHT
from app.services.dream_cycle import (
    EXPLICIT_COOLDOWN_CYCLES,
    PENDING_PER_BATCH,
    plan_cycle,
    run_cycle,
)
from app.services.dream_identity import cycle_id_for, cycle_window, window_start
from app.services.dream_replay import DREAM_STREAM_MAX_LEN, STALE_ENTRY_S
from app.services.dream_reports import (
    CycleReport,
    DreamReport,
    PlannedCluster,
    PlannedLink,
    PlannedReplay,
)
from app.services.dream_routing import (
    CONSUMER,
    GROUP,
    PEEK_MAX,
    ROUTE_BATCH,
    ROUTE_MAX,
    SalienceEntry,
    ensure_group,
    peek_entries,
    pending_entries,
    route_salience,
)
from app.services.dream_users import RECENT_WINDOWS, select_users
from app.services.jobs import run_job

__all__ = [
    "CONSUMER",
    "DREAM_STREAM_MAX_LEN",
    "ENTITY_LINKS_PER_MEMORY",
    "EXPLICIT_COOLDOWN_CYCLES",
    "GROUP",
    "MEMBER_WEIGHT",
    "PEEK_MAX",
    "PENDING_PER_BATCH",
    "RECENT_WINDOWS",
    "ROUTE_BATCH",
    "ROUTE_MAX",
    "STALE_ENTRY_S",
    "CycleReport",
    "DreamKeys",
    "DreamReport",
    "PlannedCluster",
    "PlannedLink",
    "PlannedReplay",
    "SalienceEntry",
    "cycle_id_for",
    "cycle_window",
    "ensure_group",
    "peek_entries",
    "pending_entries",
    "plan_cycle",
    "route_salience",
    "run_cycle",
    "run_dream",
    "select_users",
    "window_start",
]

_log = logging.getLogger(__name__)


def run_dream(
    settings: Settings,
    tenant_id: str | None = None,
    user_id: str | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
    *,
    client: redis.Redis | None = None,
) -> DreamReport:
    """The dream beat (no user: every tenant, or one, up to ENGRAM_DREAM_USERS_PER_RUN users)
    or one user's cycle on demand. Each user's cycle runs under its job lock: a user whose
    cycle is running elsewhere is skipped. A failing user is logged and the others go on
    (on demand, the error is raised)."""
    if user_id is not None and tenant_id is None:
        raise ValueError("tenant_id is required with user_id")
    if user_id == KNOWLEDGE_USER:
        raise ValueError("user_id: the tenant's knowledge is no user and is not dreamt")
    now = now or datetime.now(UTC)
    client = client or get_redis(settings)
    report = DreamReport()
    if not dry_run:
        report.routed = route_salience(settings, client)
    if user_id is not None:
        assert tenant_id is not None
        targets = [(tenant_id, user_id)]
    else:
        targets = select_users(settings, client, now, tenant_id)
    tick = window_start(cycle_window(now, settings.dream_interval_s), settings.dream_interval_s)
    for tenant, user in targets:
        if dry_run:
            report.cycles.append(
                run_cycle(settings, tenant, user, dry_run=True, client=client, now=now)
            )
            continue
        try:
            with run_job("dream", tenant, scope=user, tick=tick) as run:
                if run is None:
                    report.skipped.append((tenant, user))
                    continue
                cycle = run_cycle(settings, tenant, user, client=client, now=now)
                run.rows = len(cycle.replays)
                run.detail = {
                    "cycle_id": str(cycle.cycle_id),
                    "already_done": cycle.already_done,
                    "links": len(cycle.links),
                    "clusters": len(cycle.clusters),
                    "acked": cycle.acked,
                    "importance_raised": len(cycle.analytics.raised) if cycle.analytics else 0,
                }
                report.cycles.append(cycle)
        except Exception as exc:
            if user_id is not None:
                raise
            _log.exception("dream cycle of %s/%s failed", tenant, user)
            report.failed.append((tenant, user, f"{type(exc).__name__}: {exc}"))
    return report
