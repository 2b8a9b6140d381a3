"""The dream cycle against real Postgres and Redis: replay, cross-links, merged clusters,
exactly-once effects across reruns and crashes, dry runs, graph analytics and job locks."""

from __future__ import annotations

import hashlib
import math
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import networkx as nx
import pytest
from networkx.algorithms.link_analysis.pagerank_alg import _pagerank_python
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.semantic import dream as dream_sql
from app.scoring.replay import cluster_key
from app.services import dream, graph_analytics
from app.services.dream import DreamKeys, plan_cycle, route_salience, run_dream

NOW = datetime(2026, 3, 2, 12, 10, tzinfo=UTC)
BEFORE = NOW - timedelta(minutes=20)

# name, kind, content, importance, emotional intensity, embedding as {axis: value}
SPEC: list[tuple[str, str, str, float, float, dict[int, float]]] = [
    ("m1", "fact", "The Atlas launch moved to March", 0.5, 0.6, {0: 1.0, 10: 0.1}),
    ("m2", "decision", "We decided the Atlas launch is in March", 0.6, 0.7, {0: 1.0, 11: 0.1}),
    ("m3", "fact", "Atlas ships in March after the review", 0.4, 0.5, {0: 1.0, 12: 0.1}),
    ("m4", "preference", "Alice prefers aisle seats", 0.5, 0.3, {1: 1.0}),
    ("m5", "preference", "Alice likes sitting on the aisle", 0.5, 0.3, {1: 0.85, 2: 0.527}),
    ("m6", "event", "Alice flew to Lisbon in May", 0.5, 0.2, {3: 1.0}),
    ("m7", "fact", "The Lisbon office opens at nine", 0.5, 0.1, {4: 1.0}),
    ("hub", "goal", "Alice wants to run a marathon", 0.2, 0.0, {5: 1.0}),
    *[
        (f"leaf{i}", "fact", f"Training note number {i} for the marathon", 0.5, 0.0, {20 + i: 1.0})
        for i in range(1, 7)
    ],
]
CLUSTER = ("m1", "m2", "m3")
TAGGED = ("m1", "m2", "m3", "m4")  # their source turns won attention


@dataclass
class History:
    user: str
    ids: dict[str, uuid.UUID]
    turns: dict[str, uuid.UUID]
    entity: uuid.UUID
    unknown_turn: uuid.UUID = field(default_factory=uuid.uuid4)

    def name_of(self, memory_id: uuid.UUID) -> str:
        return {v: k for k, v in self.ids.items()}[memory_id]


def vector(dim: int, parts: dict[int, float]) -> str:
    v = [0.0] * dim
    for axis, x in parts.items():
        v[axis] = x
    norm = math.sqrt(sum(x * x for x in v))
    return "[" + ",".join(f"{x / norm:.8f}" for x in v) + "]"


def new_history(user: str) -> History:
    names = [s[0] for s in SPEC]
    ids = dict(zip(names, sorted(uuid.uuid4() for _ in names), strict=True))
    return History(
        user=user,
        ids=ids,
        turns={n: uuid.uuid4() for n in names},
        entity=uuid.uuid4(),
    )


def build(settings: Settings, tenant: str, h: History) -> None:
    """Write the history's memories, one shared entity and the hub's associations."""
    rows = [
        {
            "id": h.ids[name],
            "tenant": tenant,
            "user": h.user,
            "kind": kind,
            "content": content,
            "hash": hashlib.sha256(content.lower().encode()).hexdigest(),
            "importance": importance,
            "emotional": emotional,
            "at": BEFORE,
            "turns": [h.turns[name]],
            "embedding": vector(settings.embedding_dim, parts),
            "tags": [kind],
        }
        for name, kind, content, importance, emotional, parts in SPEC
    ]
    with unit_of_work(tenant) as db:
        db.execute(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, summary,"
                " content_hash, importance, emotional_intensity, salience, occurred_at,"
                " valid_from, source_turn_ids, embedding, tags)"
                " VALUES (:id, :tenant, :user, :kind, :content, :content, :hash, :importance,"
                " :emotional, :emotional, :at, :at, :turns, CAST(:embedding AS vector), :tags)"
            ),
            rows,
        )
        db.execute(
            text(
                "INSERT INTO conceptual.entities (id, tenant_id, user_id, name, canonical_name,"
                " kind, mention_count) VALUES (:id, :tenant, :user, 'Lisbon', 'lisbon',"
                " 'place', 2)"
            ),
            {"id": h.entity, "tenant": tenant, "user": h.user},
        )
        db.execute(
            text(
                "INSERT INTO conceptual.mentions (id, tenant_id, user_id, entity_id, memory_id,"
                " surface) VALUES (gen_random_uuid(), :tenant, :user, :entity, :memory, 'Lisbon')"
            ),
            [
                {"tenant": tenant, "user": h.user, "entity": h.entity, "memory": h.ids[n]}
                for n in ("m6", "m7")
            ],
        )
        db.execute(
            text(
                "INSERT INTO conceptual.associations (tenant_id, user_id, memory_a, memory_b,"
                " weight, co_activations, origin, last_activated_at)"
                " VALUES (:tenant, :user, :a, :b, 0.6, 3, 'hebbian', :at)"
            ),
            [
                {
                    "tenant": tenant,
                    "user": h.user,
                    "a": min(h.ids["hub"], h.ids[f"leaf{i}"]),
                    "b": max(h.ids["hub"], h.ids[f"leaf{i}"]),
                    "at": BEFORE,
                }
                for i in range(1, 7)
            ],
        )


def tag(client: Any, settings: Settings, tenant: str, h: History) -> None:
    """What attention does for winners: XADD their turns to the salience stream."""
    stream = RedisKeys.from_settings(settings).salience_stream()
    for name in TAGGED:
        client.xadd(
            stream,
            {
                "tenant_id": tenant,
                "user_id": h.user,
                "turn_id": str(h.turns[name]),
                "salience": "0.8000",
                "emotional_intensity": "0.9000",
            },
        )
    client.xadd(  # a turn that produced no memory (and is not in L2): dropped, not kept
        stream,
        {
            "tenant_id": tenant,
            "user_id": h.user,
            "turn_id": str(h.unknown_turn),
            "salience": "0.7",
            "emotional_intensity": "0.5",
        },
    )


def wipe(tenant: str, user: str) -> None:
    with unit_of_work(tenant) as db:
        params = {"tenant": tenant, "user": user}
        db.execute(
            text("DELETE FROM semantic.memories WHERE tenant_id = :tenant AND user_id = :user"),
            params,
        )
        db.execute(
            text("DELETE FROM conceptual.entities WHERE tenant_id = :tenant AND user_id = :user"),
            params,
        )


def snapshot(tenant: str, user: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything the cycle may change for the user (timestamps of bookkeeping aside)."""
    params = {"tenant": tenant, "user": user}
    where = " WHERE tenant_id = :tenant AND user_id = :user"
    queries = {
        "memories": "SELECT id, kind, content, summary, content_hash, round(importance::numeric,"
        " 6), round(consolidation_strength::numeric, 6), replay_count, member_ids, tags, topics,"
        " source_turn_ids, valid_to, archived_at, occurred_at, metadata, embedding::text"
        " FROM semantic.memories" + where + " ORDER BY id",
        "associations": "SELECT memory_a, memory_b, origin, round(weight::numeric, 6),"
        " co_activations, last_activated_at FROM conceptual.associations"
        + where
        + " ORDER BY memory_a, memory_b",
        "replays": "SELECT cycle_id, memory_id, round(priority::numeric, 6), replayed_at"
        " FROM semantic.replays" + where + " ORDER BY cycle_id, memory_id",
        "mentions": "SELECT entity_id, memory_id, surface FROM conceptual.mentions"
        + where
        + " ORDER BY entity_id, memory_id",
        "entities": "SELECT id, canonical_name, mention_count FROM conceptual.entities"
        + where
        + " ORDER BY id",
    }
    with unit_of_work(tenant) as db:
        return {k: [tuple(r) for r in db.execute(text(q), params)] for k, q in queries.items()}


def memory_rows(tenant: str, user: str) -> dict[uuid.UUID, Any]:
    with unit_of_work(tenant) as db:
        rows = db.execute(
            text(
                "SELECT id, kind, content, summary, importance, consolidation_strength,"
                " replay_count, member_ids, valid_to, content_hash"
                " FROM semantic.memories WHERE tenant_id = :tenant AND user_id = :user"
            ),
            {"tenant": tenant, "user": user},
        )
        return {r.id: r for r in rows}


def edges(tenant: str, user: str) -> dict[frozenset[uuid.UUID], Any]:
    with unit_of_work(tenant) as db:
        rows = db.execute(
            text(
                "SELECT memory_a, memory_b, origin, weight, co_activations"
                " FROM conceptual.associations WHERE tenant_id = :tenant AND user_id = :user"
            ),
            {"tenant": tenant, "user": user},
        )
        return {frozenset((r.memory_a, r.memory_b)): r for r in rows}


def pending_count(client: Any, settings: Settings) -> int:
    keys = DreamKeys.from_settings(settings)
    try:
        return int(client.xpending(keys.salience(), dream.GROUP)["pending"])
    except Exception:  # no group yet
        return 0


@pytest.fixture
def history(settings: Settings, redis_client: Any, tenant: str) -> History:
    h = new_history("alice")
    build(settings, tenant, h)
    tag(redis_client, settings, tenant, h)
    return h


def test_cycle_replays_links_merges_once(
    settings: Settings, redis_client: Any, tenant: str, history: History
) -> None:
    h = history
    bob = new_history("bob")
    build(settings, tenant, bob)
    tag(redis_client, settings, tenant, bob)
    bob_before = snapshot(tenant, "bob")

    report = run_dream(settings, tenant_id=tenant, user_id="alice", now=NOW)
    assert report.skipped == [] and report.failed == []
    (cycle,) = report.cycles
    assert not cycle.already_done
    assert cycle.cycle_id == dream.cycle_id_for(
        tenant, "alice", dream.cycle_window(NOW, settings.dream_interval_s)
    )

    rows = memory_rows(tenant, "alice")
    # Every memory was replayed once (14 ≤ the batch): strength 0 → 0.1, one replay.
    for name, memory_id in h.ids.items():
        assert rows[memory_id].replay_count == 1, name
        assert rows[memory_id].consolidation_strength == pytest.approx(0.1), name
    sources = {r.memory_id: r.source for r in cycle.replays}
    assert {h.name_of(m) for m, s in sources.items() if s == "salience"} == set(TAGGED)
    # Emotional, tagged memories come first.
    assert {h.name_of(r.memory_id) for r in cycle.replays[:4]} == set(TAGGED)

    # The tight cluster became one consolidated memory; its members are kept.
    merged = [r for r in rows.values() if r.kind == "consolidated"]
    assert len(merged) == 1
    consolidated = merged[0]
    members = sorted(h.ids[n] for n in CLUSTER)
    assert sorted(consolidated.member_ids) == members
    assert consolidated.content_hash == cluster_key(members)
    assert consolidated.importance >= 0.6  # the members' highest (or more: it is central)
    assert consolidated.replay_count == 0
    assert "(+2 related)" in consolidated.summary
    assert all(rows[m].valid_to is None for m in members)
    assert [c.memory_id for c in cycle.clusters] == [consolidated.id]

    links = edges(tenant, "alice")
    eta = settings.hebbian_rate
    for m in members:
        assert links[frozenset((consolidated.id, m))].origin == "member"
    for a, b in (("m1", "m2"), ("m1", "m3"), ("m2", "m3"), ("m4", "m5")):
        edge = links[frozenset((h.ids[a], h.ids[b]))]
        assert edge.origin == "embedding"
        assert edge.weight == pytest.approx(eta)
    lisbon = links[frozenset((h.ids["m6"], h.ids["m7"]))]
    assert (lisbon.origin, lisbon.weight) == ("entity", pytest.approx(eta))
    # The hub's edges fired together in the replay: one Hebbian step each.
    for i in range(1, 7):
        edge = links[frozenset((h.ids["hub"], h.ids[f"leaf{i}"]))]
        assert edge.origin == "hebbian"
        assert edge.weight == pytest.approx(0.6 + eta * 0.4)
        assert edge.co_activations == 4
    # Unrelated memories are not linked.
    assert frozenset((h.ids["m4"], h.ids["m6"])) not in links

    # PageRank fed importance: the hub (0.2) is now important.
    assert rows[h.ids["hub"]].importance > 0.5
    assert h.ids["hub"] in {m for m, _ in cycle.analytics.raised}
    assert all(rows[h.ids[n]].importance >= imp for n, _, _, imp, _, _ in SPEC)

    # The salience entries were consumed and acked; replays went to the dream stream.
    keys = DreamKeys.from_settings(settings)
    assert len(cycle.covered) == len(TAGGED) + 1  # the unknown turn's entry is dropped
    assert cycle.acked == len(TAGGED) + 1
    assert redis_client.hlen(keys.pending(tenant, "alice")) == 0
    assert redis_client.xlen(keys.stream()) == len(SPEC)
    # Bob's entries were filed and wait for his cycle; his rows are untouched.
    assert redis_client.hlen(keys.pending(tenant, "bob")) == len(TAGGED) + 1
    assert pending_count(redis_client, settings) == len(TAGGED) + 1
    assert snapshot(tenant, "bob") == bob_before

    # The same cycle again: nothing more happens.
    after = snapshot(tenant, "alice")
    again = run_dream(settings, tenant_id=tenant, user_id="alice", now=NOW)
    assert again.cycles[0].already_done
    assert again.cycles[0].replays == [] and again.cycles[0].analytics is None
    assert snapshot(tenant, "alice") == after
    # Graph analytics over the same graph again (as after a crash before it was marked
    # done) is a fixed point.
    redis_client.delete(keys.analysed(tenant, "alice"))
    third = run_dream(settings, tenant_id=tenant, user_id="alice", now=NOW).cycles[0]
    assert third.analytics is not None
    assert third.analytics.raised == [] and third.analytics.community_links == []
    assert snapshot(tenant, "alice") == after
    assert redis_client.xlen(keys.stream()) == len(SPEC)


def test_dry_run_plans_and_writes_nothing(
    settings: Settings, redis_client: Any, tenant: str, history: History
) -> None:
    h = history
    keys = DreamKeys.from_settings(settings)
    before = snapshot(tenant, "alice")
    salience_len = redis_client.xlen(keys.salience())

    report = run_dream(settings, tenant_id=tenant, user_id="alice", now=NOW, dry_run=True)
    (plan,) = report.cycles
    assert plan.dry_run
    assert {r.memory_id for r in plan.replays} == set(h.ids.values())
    (cluster,) = plan.clusters
    assert cluster.member_ids == tuple(sorted(h.ids[n] for n in CLUSTER))
    planned_links = {frozenset((link.memory_a, link.memory_b)): link for link in plan.links}
    assert planned_links[frozenset((h.ids["m6"], h.ids["m7"]))].origin == "entity"
    assert planned_links[frozenset((h.ids["m4"], h.ids["m5"]))].created
    assert h.ids["hub"] in {m for m, _ in plan.analytics.raised}
    assert len(plan.covered) == len(TAGGED) + 1
    summary = report.summary()
    assert summary["cycles"][0]["plan"]["clusters"][0]["member_ids"] == [
        str(m) for m in cluster.member_ids
    ]

    # Nothing written: tables, streams, group, job runs.
    assert snapshot(tenant, "alice") == before
    assert redis_client.xlen(keys.salience()) == salience_len
    assert redis_client.xlen(keys.stream()) == 0
    assert pending_count(redis_client, settings) == 0
    assert redis_client.exists(keys.pending(tenant, "alice")) == 0
    with unit_of_work(tenant) as db:
        assert db.execute(text("SELECT count(*) FROM meta.job_runs")).scalar() == 0

    # The real run does what was planned.
    done = run_dream(settings, tenant_id=tenant, user_id="alice", now=NOW).cycles[0]
    assert [c.memory_id for c in done.clusters] == [cluster.memory_id]
    assert {r.memory_id for r in done.replays} == {r.memory_id for r in plan.replays}
    assert {(x.memory_a, x.memory_b, x.origin) for x in done.links} == {
        (x.memory_a, x.memory_b, x.origin) for x in plan.links
    }


class BoomError(RuntimeError):
    pass


@pytest.mark.parametrize("crash", ["consolidation", "after_commit", "analytics"])
def test_crash_and_rerun_equals_clean_run(
    settings: Settings,
    redis_client: Any,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    crash: str,
) -> None:
    h = new_history("carol")
    keys = DreamKeys.from_settings(settings)

    # A clean run over the history.
    build(settings, tenant, h)
    tag(redis_client, settings, tenant, h)
    run_dream(settings, tenant_id=tenant, user_id="carol", now=NOW)
    clean = snapshot(tenant, "carol")
    assert redis_client.hlen(keys.pending(tenant, "carol")) == 0

    # The same history again (its cycle not marked analysed), and a run that dies part-way.
    wipe(tenant, "carol")
    redis_client.delete(keys.analysed(tenant, "carol"))
    build(settings, tenant, h)
    pristine = snapshot(tenant, "carol")
    tag(redis_client, settings, tenant, h)

    def boom(*_: Any, **__: Any) -> Any:
        raise BoomError(crash)

    if crash == "consolidation":  # inside the transaction, after receipts and links
        monkeypatch.setattr(dream_sql, "insert_consolidated", boom)
        with pytest.raises(BoomError):
            run_dream(settings, tenant_id=tenant, user_id="carol", now=NOW)
        assert snapshot(tenant, "carol") == pristine  # rolled back as a whole
    elif crash == "after_commit":  # consolidation committed, killed before the acks
        route_salience(settings, redis_client)
        plan_cycle(settings, tenant, "carol", dry_run=False, client=redis_client, now=NOW)
    else:  # acked, then graph analytics fails after raising importance
        monkeypatch.setattr(dream_sql, "add_community_links", boom)
        with pytest.raises(BoomError):
            run_dream(settings, tenant_id=tenant, user_id="carol", now=NOW)
    monkeypatch.undo()
    if crash != "analytics":
        assert redis_client.hlen(keys.pending(tenant, "carol")) == len(TAGGED) + 1

    rerun = run_dream(settings, tenant_id=tenant, user_id="carol", now=NOW)
    assert rerun.cycles[0].already_done == (crash != "consolidation")
    assert snapshot(tenant, "carol") == clean
    assert redis_client.hlen(keys.pending(tenant, "carol")) == 0
    with unit_of_work(tenant) as db:
        statuses = db.execute(
            text("SELECT status FROM meta.job_runs WHERE scope = 'carol' ORDER BY started_at")
        ).scalars()
        assert list(statuses)[-1] == "done"


def test_beat_picks_waiting_and_recent_users_once_per_window(
    settings: Settings, redis_client: Any, tenant: str, history: History
) -> None:
    quiet = new_history("dave")  # explicit memories only: no salience entries
    build(settings, tenant, quiet)
    old = new_history("erin")
    build(settings, tenant, old)
    with unit_of_work(tenant) as db:  # erin's memories are long past: nothing recent
        db.execute(
            text(
                "UPDATE semantic.memories SET occurred_at = occurred_at - interval '30 days'"
                " WHERE tenant_id = :tenant AND user_id = 'erin'"
            ),
            {"tenant": tenant},
        )
    erin_before = snapshot(tenant, "erin")

    report = run_dream(settings, tenant_id=tenant, now=NOW)
    assert [(c.tenant_id, c.user_id) for c in report.cycles] == [
        (tenant, "alice"),
        (tenant, "dave"),
    ]
    assert all(
        r.replay_count == 1
        for r in memory_rows(tenant, "dave").values()
        if r.kind != "consolidated"
    )
    assert snapshot(tenant, "erin") == erin_before
    keys = DreamKeys.from_settings(settings)
    assert redis_client.zcard(keys.users()) == 0

    # Same window: every due user has had its cycle.
    assert run_dream(settings, tenant_id=tenant, now=NOW + timedelta(minutes=5)).cycles == []


def test_small_batch_prefers_tagged_memories(
    settings: Settings, redis_client: Any, tenant: str, history: History
) -> None:
    h = history
    small = settings.model_copy(update={"dream_batch": 3})
    cycle = run_dream(small, tenant_id=tenant, user_id="alice", now=NOW).cycles[0]
    replayed = {h.name_of(r.memory_id) for r in cycle.replays}
    assert len(replayed) == 3 and replayed <= set(TAGGED)
    assert all(r.source == "salience" for r in cycle.replays)
    # Entries of the replayed memories (and the memory-less one) are consumed; the one whose
    # memory did not fit waits for the next cycle.
    keys = DreamKeys.from_settings(settings)
    assert cycle.acked == 4
    assert redis_client.hlen(keys.pending(tenant, "alice")) == 1
    assert pending_count(redis_client, settings) == 1
    nxt = run_dream(
        small,
        tenant_id=tenant,
        user_id="alice",
        now=NOW + timedelta(seconds=settings.dream_interval_s),
    ).cycles[0]
    # m4 now fits (after the new consolidated memory, which inherits its members' emotion
    # and their decision tag).
    assert h.ids["m4"] in {r.memory_id for r in nxt.replays}
    assert nxt.replays[0].memory_id in {
        r.id for r in memory_rows(tenant, "alice").values() if r.kind == "consolidated"
    }
    assert redis_client.hlen(keys.pending(tenant, "alice")) == 0


def test_parallel_runs_for_one_user_one_is_skipped(
    settings: Settings,
    redis_client: Any,
    tenant: str,
    history: History,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entered = threading.Event()
    release = threading.Event()
    real = dream.run_cycle

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(dream, "run_cycle", held)
    results: dict[str, Any] = {}

    def start(name: str) -> threading.Thread:
        def target() -> None:
            results[name] = run_dream(settings, tenant_id=tenant, user_id="alice", now=NOW)

        thread = threading.Thread(target=target)
        thread.start()
        return thread

    first = start("first")
    assert entered.wait(60)
    second = start("second")
    second.join(60)
    release.set()
    first.join(60)
    assert results["second"].skipped == [(tenant, "alice")]
    assert results["second"].cycles == []
    assert len(results["first"].cycles) == 1
    assert all(
        r.replay_count == 1
        for r in memory_rows(tenant, "alice").values()
        if r.kind != "consolidated"
    )


def test_pagerank_and_communities_without_scipy() -> None:
    g = nx.Graph()
    # Two dense groups joined by one weak edge, and a star around the first group's node 0.
    a, b = list(range(6)), list(range(6, 11))
    g.add_nodes_from(range(15))
    for group in (a, b):
        for i, x in enumerate(group):
            for y in group[i + 1 :]:
                g.add_edge(x, y, weight=0.5)
    for k in range(11, 15):
        g.add_edge(0, k, weight=0.9)
    g.add_edge(a[-1], b[0], weight=0.05)
    ranks = graph_analytics.pagerank(g)
    expected = _pagerank_python(g, alpha=0.85, weight="weight", tol=1e-12, max_iter=500)
    for node, value in expected.items():
        assert ranks[node] == pytest.approx(value, abs=1e-8)
    assert max(ranks, key=ranks.__getitem__) == 0

    memories = sorted(uuid.uuid4() for _ in range(15))
    mg = graph_analytics.MemoryGraph(graph=g, memories=memories)
    count, pairs = graph_analytics.community_pairs(mg, ranks)
    assert (count, pairs) == graph_analytics.community_pairs(mg, ranks)  # seeded
    assert count >= 2
    assert memories[0] in {centre for centre, _ in pairs}
    # Only the star's centre and the hubs above twice the mean rank are raised, never lowered.
    targets = dict(graph_analytics.importance_targets(mg, ranks, dict.fromkeys(memories, 0.1)))
    assert targets[memories[0]] == pytest.approx(graph_analytics.IMPORTANCE_CEILING)
    assert all(0.1 < t <= graph_analytics.IMPORTANCE_CEILING for t in targets.values())
    assert graph_analytics.importance_targets(mg, ranks, dict.fromkeys(memories, 1.0)) == []
