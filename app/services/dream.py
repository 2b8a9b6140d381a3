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
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings, get_settings
from app.db.session import app_engine, set_agent, set_tenant, unit_of_work
from app.extraction.smalltalk import says_nothing
from app.keys import RedisKeys
from app.layers.scopes import KNOWLEDGE_USER
from app.layers.semantic import dream as dream_sql
from app.redis_client import get_redis
from app.scoring.replay import (
    CONSOLIDATION_GAIN,
    RankedReplay,
    ReplayCandidate,
    order_replays,
    plan_clusters,
)
from app.services import graph_analytics
from app.services.graph_analytics import AnalyticsReport
from app.services.jobs import run_job, tenants

_log = logging.getLogger(__name__)

GROUP = "dream"
CONSUMER = "dream-router"
ROUTE_BATCH = 1000
ROUTE_MAX = 100_000  # entries filed per run at most (the rest wait for the next run)
DREAM_STREAM_MAX_LEN = 100_000
PEEK_MAX = 10_000  # undelivered entries a dry run looks through
STALE_ENTRY_S = 7 * 86_400  # an entry whose turn gave no memory by then is dropped
EXPLICIT_COOLDOWN_CYCLES = 4
RECENT_WINDOWS = 2  # "recent memories": dated within this many windows
ENTITY_LINKS_PER_MEMORY = 8
MEMBER_WEIGHT = 0.5
PENDING_PER_BATCH = 5  # entries read per cycle: this many times ENGRAM_DREAM_BATCH
_CYCLE_NAMESPACE = uuid.UUID("5b0c3a8e-6f1d-4c2a-9e47-0d8f3b6a2c11")


class DreamKeys:
    """Redis keys of the dream cycle, under the deployment's prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    @classmethod
    def from_settings(cls, settings: Settings) -> DreamKeys:
        return cls(RedisKeys.from_settings(settings).prefix)

    def salience(self) -> str:
        return RedisKeys(self.prefix).salience_stream()

    def stream(self) -> str:
        """Replays, one entry per (cycle, memory); capped at DREAM_STREAM_MAX_LEN (~)."""
        return f"{self.prefix}:dream"

    def pending(self, tenant_id: str, user_id: str) -> str:
        """A user's routed, not yet consolidated salience entries (entry id → fields). It
        carries the user's `{tenant|user}` tag, so forgetting the user removes it."""
        return f"{self.prefix}:dream:pending:{{{tenant_id}|{user_id}}}"

    def users(self) -> str:
        """`tenant|user` of users with pending entries, scored by when they started waiting."""
        return f"{self.prefix}:dream:users"

    def analysed(self, tenant_id: str, user_id: str) -> str:
        """The last cycle whose graph analytics committed for the user; expires after two
        windows (it only spares a rerun of the same cycle from analysing the graph again)."""
        return f"{self.prefix}:dream:analysed:{{{tenant_id}|{user_id}}}"


# -- cycle identity ------------------------------------------------------------------------


def cycle_window(now: datetime, interval_s: float) -> int:
    return math.floor(now.timestamp() / interval_s)


def window_start(window: int, interval_s: float) -> datetime:
    return datetime.fromtimestamp(window * interval_s, UTC)


def cycle_id_for(tenant_id: str, user_id: str, window: int) -> uuid.UUID:
    """The same (tenant, user, window) always names the same cycle."""
    return uuid.uuid5(_CYCLE_NAMESPACE, f"{tenant_id}\x1f{user_id}\x1f{window}")


# -- reports -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedReplay:
    memory_id: uuid.UUID
    priority: float
    source: str  # salience | explicit


@dataclass(frozen=True)
class PlannedLink:
    memory_a: uuid.UUID
    memory_b: uuid.UUID
    origin: str
    weight: float
    created: bool


@dataclass(frozen=True)
class PlannedCluster:
    memory_id: uuid.UUID
    member_ids: tuple[uuid.UUID, ...]
    content: str
    summary: str


@dataclass
class CycleReport:
    tenant_id: str
    user_id: str
    cycle_id: uuid.UUID
    dry_run: bool
    already_done: bool = False  # the cycle's consolidation had committed before this run
    replays: list[PlannedReplay] = field(default_factory=list)
    links: list[PlannedLink] = field(default_factory=list)
    clusters: list[PlannedCluster] = field(default_factory=list)
    analytics: AnalyticsReport | None = None
    entries: int = 0  # salience entries of the user looked at
    covered: list[str] = field(default_factory=list)  # entry ids the cycle consumed
    acked: int = 0

    def summary(self) -> dict[str, Any]:
        """JSON-ready: counts, and the plan itself for a dry run."""
        out: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "cycle_id": str(self.cycle_id),
            "dry_run": self.dry_run,
            "already_done": self.already_done,
            "replays": len(self.replays),
            "links": len(self.links),
            "clusters": len(self.clusters),
            "entries": self.entries,
            "acked": self.acked,
        }
        if self.analytics is not None:
            out["importance_raised"] = len(self.analytics.raised)
            out["community_links"] = len(self.analytics.community_links)
        if self.dry_run:
            out["plan"] = json.loads(
                json.dumps(
                    {
                        "replays": [asdict(r) for r in self.replays],
                        "links": [asdict(r) for r in self.links],
                        "clusters": [asdict(c) for c in self.clusters],
                        "analytics": asdict(self.analytics) if self.analytics else None,
                    },
                    default=str,
                )
            )
        return out


@dataclass
class DreamReport:
    routed: int = 0
    cycles: list[CycleReport] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # held by another run
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (tenant, user, error)

    def summary(self) -> dict[str, Any]:
        return {
            "routed": self.routed,
            "users": len(self.cycles),
            "replays": sum(len(c.replays) for c in self.cycles),
            "clusters": sum(len(c.clusters) for c in self.cycles),
            "skipped": [list(s) for s in self.skipped],
            "failed": [list(f) for f in self.failed],
            "cycles": [c.summary() for c in self.cycles],
        }


# -- the salience stream -------------------------------------------------------------------


@dataclass(frozen=True)
class SalienceEntry:
    entry_id: str
    turn_id: uuid.UUID
    emotional_intensity: float
    salience: float

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(int(self.entry_id.split("-")[0]) / 1000, UTC)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _float(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(x) else min(1.0, max(0.0, x))


def _parse(fields: dict[Any, Any]) -> tuple[str, str, dict[str, Any]] | None:
    """(tenant, user, filed fields) of a salience entry, or None if it is malformed."""
    f = {_text(k): _text(v) for k, v in fields.items()}
    try:
        turn = uuid.UUID(f["turn_id"])
        tenant, user = f["tenant_id"], f["user_id"]
    except (KeyError, ValueError):
        return None
    if not tenant or not user or "|" in tenant or "|" in user:
        return None
    filed = {
        "turn_id": str(turn),
        "emotional_intensity": _float(f.get("emotional_intensity")),
        "salience": _float(f.get("salience")),
    }
    return tenant, user, filed


def ensure_group(client: redis.Redis, keys: DreamKeys) -> None:
    try:
        client.xgroup_create(keys.salience(), GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _file(client: redis.Redis, keys: DreamKeys, entries: Sequence[Any]) -> int:
    pipe = client.pipeline(transaction=False)
    malformed: list[str] = []
    for raw_id, fields in entries:
        entry_id = _text(raw_id)
        parsed = _parse(fields or {})
        if parsed is None:
            malformed.append(entry_id)
            continue
        tenant, user, filed = parsed
        pipe.hset(keys.pending(tenant, user), entry_id, json.dumps(filed))
        pipe.zadd(keys.users(), {f"{tenant}|{user}": _entry_order(entry_id)[0]}, nx=True)
    if malformed:
        _log.warning("dropping %d malformed salience entries: %s", len(malformed), malformed[:5])
        pipe.xack(keys.salience(), GROUP, *malformed)
    pipe.execute()
    return len(entries) - len(malformed)


def route_salience(settings: Settings, client: redis.Redis, *, limit: int = ROUTE_MAX) -> int:
    """File new salience entries under their users (they stay pending in the group until a
    cycle acks them); also re-files entries a router read but may not have filed."""
    keys = DreamKeys.from_settings(settings)
    ensure_group(client, keys)
    routed = 0
    idle_ms = max(settings.claim_min_idle_ms, int(settings.dream_interval_s * 2000))
    claimed = client.xautoclaim(
        keys.salience(), GROUP, CONSUMER, min_idle_time=idle_ms, start_id="0-0", count=ROUTE_BATCH
    )
    if claimed and claimed[1]:
        routed += _file(client, keys, [e for e in claimed[1] if e and e[1] is not None])
    while routed < limit:
        reply = client.xreadgroup(GROUP, CONSUMER, {keys.salience(): ">"}, count=ROUTE_BATCH)
        entries = reply[0][1] if reply else []
        if not entries:
            break
        routed += _file(client, keys, entries)
    return routed


def _decode_filed(entry_id: str, value: Any) -> SalienceEntry | None:
    try:
        f = json.loads(_text(value))
        return SalienceEntry(
            entry_id=entry_id,
            turn_id=uuid.UUID(f["turn_id"]),
            emotional_intensity=_float(f.get("emotional_intensity")),
            salience=_float(f.get("salience")),
        )
    except (KeyError, ValueError, TypeError):
        return None


def pending_entries(
    client: redis.Redis, keys: DreamKeys, tenant_id: str, user_id: str, limit: int
) -> list[SalienceEntry]:
    """The user's filed entries, oldest first (at most `limit`)."""
    raw = client.hgetall(keys.pending(tenant_id, user_id))
    entries = [_decode_filed(_text(k), v) for k, v in raw.items()]
    found = sorted((e for e in entries if e is not None), key=lambda e: _entry_order(e.entry_id))
    return found[:limit]


def peek_entries(
    client: redis.Redis, keys: DreamKeys, tenant_id: str, user_id: str, limit: int
) -> list[SalienceEntry]:
    """Read-only: the user's filed entries plus those the group has not delivered yet."""
    found = {e.entry_id: e for e in pending_entries(client, keys, tenant_id, user_id, limit)}
    start = "-"
    try:
        for group in client.xinfo_groups(keys.salience()):
            if _text(group.get("name")) == GROUP:
                start = "(" + _text(group.get("last-delivered-id"))
    except redis.ResponseError:  # no stream yet
        return list(found.values())
    for raw_id, fields in client.xrange(keys.salience(), min=start, max="+", count=PEEK_MAX):
        parsed = _parse(fields or {})
        if parsed is None or parsed[:2] != (tenant_id, user_id):
            continue
        entry = _decode_filed(_text(raw_id), json.dumps(parsed[2]))
        if entry is not None:
            found.setdefault(entry.entry_id, entry)
    return sorted(found.values(), key=lambda e: _entry_order(e.entry_id))[:limit]


def _ack(
    client: redis.Redis, keys: DreamKeys, tenant_id: str, user_id: str, entry_ids: Sequence[str]
) -> int:
    """Ack consumed entries, unfile them, and move the user to the back of the queue (or off
    it when nothing is left)."""
    member = f"{tenant_id}|{user_id}"
    pending = keys.pending(tenant_id, user_id)
    acked = 0
    if entry_ids:
        pipe = client.pipeline(transaction=False)
        pipe.xack(keys.salience(), GROUP, *entry_ids)
        pipe.hdel(pending, *entry_ids)
        acked = int(pipe.execute()[0])
    if client.hlen(pending) == 0:
        client.zrem(keys.users(), member)
    else:
        client.zadd(keys.users(), {member: int(datetime.now(UTC).timestamp() * 1000)}, xx=True)
    return acked


# -- one user's cycle ----------------------------------------------------------------------


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


def _covered(
    entries: Sequence[SalienceEntry],
    turns: dict[uuid.UUID, list[dream_sql.TurnMemory]],
    replayed: set[uuid.UUID],
    now: datetime,
) -> list[str]:
    """Entries whose effect is done: every memory of their turn replayed, or no memory and
    none to come (or too old to wait for)."""
    out: list[str] = []
    for entry in entries:
        rows = turns.get(entry.turn_id, [])
        memories = {r.memory.memory_id for r in rows if r.memory is not None}
        if memories:
            if memories <= replayed:
                out.append(entry.entry_id)
        elif any(r.settled for r in rows) or (now - entry.at).total_seconds() > STALE_ENTRY_S:
            out.append(entry.entry_id)
    return out


def _candidates(
    entries: Sequence[SalienceEntry], turns: dict[uuid.UUID, list[dream_sql.TurnMemory]]
) -> list[ReplayCandidate]:
    found: list[ReplayCandidate] = []
    for entry in entries:
        for row in turns.get(entry.turn_id, []):
            m = row.memory
            if m is None:
                continue
            found.append(
                ReplayCandidate(
                    memory_id=m.memory_id,
                    kind=m.kind,
                    emotional_intensity=max(m.emotional_intensity, entry.emotional_intensity),
                    occurred_at=m.occurred_at,
                    tags=m.tags,
                    source="salience",
                )
            )
    return found


def _xadd_replays(
    client: redis.Redis,
    keys: DreamKeys,
    tenant_id: str,
    user_id: str,
    cycle_id: uuid.UUID,
    ranked: Sequence[RankedReplay],
) -> None:
    if not ranked:
        return
    pipe = client.pipeline(transaction=False)
    for r in ranked:
        pipe.xadd(
            keys.stream(),
            {
                "tenant_id": tenant_id,
                "user_id": user_id,
                "cycle_id": str(cycle_id),
                "memory_id": str(r.candidate.memory_id),
                "priority": f"{r.priority:.6f}",
                "source": r.candidate.source,
            },
            maxlen=DREAM_STREAM_MAX_LEN,
            approximate=True,
        )
    pipe.execute()


def _consolidate(
    session: Session,
    settings: Settings,
    report: CycleReport,
    ranked: Sequence[RankedReplay],
    now: datetime,
) -> set[uuid.UUID]:
    """Receipts, strength, links and merged clusters (the caller's transaction)."""
    tenant_id, user_id = report.tenant_id, report.user_id
    by_id = {r.candidate.memory_id: r for r in ranked}
    replayed = dream_sql.replay(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        cycle_id=report.cycle_id,
        at=now,
        replays=[(r.candidate.memory_id, r.priority) for r in ranked],
        gain=CONSOLIDATION_GAIN,
    )
    report.replays = [
        PlannedReplay(m, by_id[m].priority, by_id[m].candidate.source) for m in replayed
    ]
    report.replays.sort(key=lambda r: (-r.priority, str(r.memory_id)))
    if len(replayed) < 2:
        return set(replayed)
    params = {"session": session, "tenant_id": tenant_id, "user_id": user_id}
    similar = dream_sql.similar_pairs(
        **params,
        memory_ids=replayed,
        min_cosine=min(settings.dream_link_cosine, settings.dream_cluster_cosine),
    )
    shared = dream_sql.shared_entity_pairs(
        **params, memory_ids=replayed, per_memory=ENTITY_LINKS_PER_MEMORY
    )
    links = [(a, b, "entity") for a, b, _ in shared]
    links += [(a, b, "embedding") for a, b, c in similar if c >= settings.dream_link_cosine]
    report.links = [
        PlannedLink(r.memory_a, r.memory_b, r.origin, r.weight, r.created)
        for r in dream_sql.link_replayed(
            **params,
            memory_ids=replayed,
            links=links,
            rate=settings.hebbian_rate,
            at=now,
        )
    ]
    info = dream_sql.replayed_info(**params, memory_ids=replayed)
    mergeable = {r.memory_id: r.content for r in info if r.kind != "consolidated" and not r.member}
    # Small talk is never consolidated ("Wow, Caroline! | Wow, fantastic, Caroline!").
    mergeable = {m: content for m, content in mergeable.items() if not says_nothing(content)}
    plans = plan_clusters(
        mergeable,
        similar,
        min_cosine=settings.dream_cluster_cosine,
        min_size=settings.dream_cluster_min,
    )
    rows = [
        {
            "id": uuid.uuid5(_CYCLE_NAMESPACE, f"{tenant_id}\x1f{user_id}\x1f{p.key}"),
            "content_hash": p.key,
            "content": p.text.content,
            "summary": p.text.summary,
            "member_ids": [str(m) for m in p.members],
        }
        for p in plans
    ]
    created = dream_sql.insert_consolidated(
        **params,
        cycle_id=report.cycle_id,
        clusters=rows,
        member_weight=MEMBER_WEIGHT,
        at=now,
    )
    text_of = {r["id"]: r for r in rows}
    report.clusters = [
        PlannedCluster(
            c.memory_id,
            c.member_ids,
            text_of[c.memory_id]["content"],
            text_of[c.memory_id]["summary"],
        )
        for c in created
    ]
    return set(replayed)


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
                [*_candidates(entries, turns), *explicit], now, settings.dream_batch
            )
            if not dry_run:
                _xadd_replays(client, keys, tenant_id, user_id, cycle_id, ranked)
            replayed = _consolidate(session, settings, report, ranked, now)
        report.covered = _covered(entries, turns, replayed, now)
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
    report.acked = _ack(client, keys, tenant_id, user_id, report.covered)
    marker = keys.analysed(tenant_id, user_id)
    if report.already_done and _text(client.get(marker) or b"") == str(report.cycle_id):
        return report  # this cycle's analytics committed too: nothing left to do
    with unit_of_work(tenant_id, all_agents=True) as session:
        report.analytics = graph_analytics.analyse(session, settings, tenant_id, user_id, now=now)
    client.set(marker, str(report.cycle_id), ex=max(1, int(settings.dream_interval_s * 2)))
    return report


# -- the beat entry ------------------------------------------------------------------------


def _split(member: Any) -> tuple[str, str] | None:
    tenant, sep, user = _text(member).partition("|")
    return (tenant, user) if sep and tenant and user else None


def select_users(
    settings: Settings,
    client: redis.Redis,
    now: datetime,
    tenant_id: str | None = None,
) -> list[tuple[str, str]]:
    """Up to ENGRAM_DREAM_USERS_PER_RUN users whose cycle of the current window has not run:
    first those with salience entries waiting (longest waiting first), then those with
    recent never-replayed memories (explicit memories), least recently dreamt first."""
    keys = DreamKeys.from_settings(settings)
    cap = settings.dream_users_per_run
    window = cycle_window(now, settings.dream_interval_s)
    start = window_start(window, settings.dream_interval_s)
    waiting: list[tuple[str, str]] = []
    for member in client.zrange(keys.users(), 0, cap * 10 - 1):
        pair = _split(member)
        if pair is not None and (tenant_id is None or pair[0] == tenant_id):
            waiting.append(pair)
    chosen: list[tuple[str, str]] = []
    by_tenant: dict[str, list[str]] = {}
    for tenant, user in waiting:
        by_tenant.setdefault(tenant, []).append(user)
    for tenant, users in by_tenant.items():
        ids = {cycle_id_for(tenant, u, window): u for u in users}
        with unit_of_work(tenant, all_agents=True) as session:
            done = dream_sql.cycles_done(session=session, cycle_ids=list(ids))
        chosen += [(tenant, u) for c, u in ids.items() if c not in done]
    order = {pair: i for i, pair in enumerate(waiting)}
    chosen = sorted(chosen, key=order.__getitem__)[:cap]
    seen = set(chosen)
    since = start - timedelta(seconds=settings.dream_interval_s * (RECENT_WINDOWS - 1))
    for tenant in [tenant_id] if tenant_id is not None else tenants():
        if len(chosen) >= cap:
            break
        with unit_of_work(tenant, all_agents=True) as session:
            users = dream_sql.recent_users(
                session=session,
                tenant_id=tenant,
                since=since,
                window_start=start,
                limit=cap,
            )
        for user in users:
            if (tenant, user) not in seen and len(chosen) < cap:
                chosen.append((tenant, user))
                seen.add((tenant, user))
    return chosen


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
