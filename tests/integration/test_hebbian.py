"""Hebbian association over real Postgres and Redis: searches buffer the pairs of memories they
return together, the apply strengthens exactly those edges by the closed form (once, even with
two appliers), weights converge to 1 and never pass it, unused edges weaken once per period
and are pruned under the floor, other users and tenants are untouched, a forgotten memory is
skipped, and forgetting a user removes their buffer."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.keys import RedisKeys
from app.layers.conceptual import hebbian as hebbian_sql
from app.scoring.hebbian import strengthen
from app.services import hebbian
from app.services.context import ContextRequest, assemble_context
from app.services.forget import forget_user
from app.services.hebbian import (
    apply_pending,
    buffer_key,
    pending_key,
    record_coactivation,
    weaken,
)
from app.services.jobs import tick_of
from app.services.memories import MemoryIn, RememberRequest, remember
from app.services.search import SearchRequest, search

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)


def _memories(tenant: str, user: str, n: int) -> list[uuid.UUID]:
    """n plain memories written straight to L3 (no embedding needed for association tests)."""
    ids = [uuid.uuid4() for _ in range(n)]
    rows = [
        {
            "id": str(i),
            "content": f"memory {k} of {user}: {i}",
            "hash": hashlib.sha256(f"{user}-{i}".encode()).hexdigest(),
        }
        for k, i in enumerate(ids)
    ]
    with unit_of_work(tenant) as session:
        session.execute(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
                " content_hash, occurred_at, valid_from)"
                " SELECT r.id, :tenant, :user, 'fact', r.content, r.hash, now(), now()"
                " FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(id uuid, content text,"
                " hash text)"
            ),
            {"tenant": tenant, "user": user, "rows": json.dumps(rows)},
        )
    return ids


def _edges(tenant: str) -> dict[tuple[uuid.UUID, uuid.UUID], Any]:
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT memory_a, memory_b, user_id, weight, co_activations, origin,"
                " last_activated_at FROM conceptual.associations"
            )
        ).all()
    return {(r.memory_a, r.memory_b): r for r in rows}


def _key(a: uuid.UUID, b: uuid.UUID) -> tuple[uuid.UUID, uuid.UUID]:
    return (a, b) if a < b else (b, a)


def _set_edge(tenant: str, a: uuid.UUID, b: uuid.UUID, **values: Any) -> None:
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    a, b = _key(a, b)
    with unit_of_work(tenant) as session:
        session.execute(
            text(
                f"UPDATE conceptual.associations SET {assignments}"
                " WHERE memory_a = :a AND memory_b = :b"
            ),
            {"a": a, "b": b, **values},
        )


def _record(client: redis.Redis, settings: Settings, tenant: str, user: str, ids: list[Any],
            times: int = 1, at: datetime | None = None) -> None:  # fmt: skip
    keys = RedisKeys.from_settings(settings)
    for _ in range(times):
        record_coactivation(
            client, keys, tenant, user, ids, "test", max_pairs=settings.hebbian_max_pairs, at=at
        )


# -- recording and applying ---------------------------------------------------------------


def test_a_search_buffers_its_pairs_and_the_apply_strengthens_exactly_those_edges(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "hana"
    contents = [
        "Hana keeps her climbing shoes in the blue locker at the gym.",
        "Hana climbs at the downtown gym every Tuesday evening.",
        "Hana's climbing partner is called Ruben.",
        "The invoice for the office printer was paid in March.",
    ]
    stored = remember(
        tenant,
        RememberRequest(user_id=user, memories=[MemoryIn(content=c) for c in contents]),
        settings=settings,
        embedder=embedder,
    )
    assert len({r.id for r in stored}) == 4
    keys = RedisKeys.from_settings(settings)
    buffer = buffer_key(keys, tenant, user)

    def run_search() -> list[uuid.UUID]:
        result = search(
            tenant,
            SearchRequest(user_id=user, query="where does Hana go climbing?", limit=3),
            settings=settings,
            embedder=embedder,
            client=redis_client,
        )
        return [h.id for h in result.hits if h.layer == "memory"]

    returned = run_search()
    assert len(returned) == 3
    assert redis_client.llen(buffer) == 1
    assert redis_client.sismember(pending_key(keys), f"{tenant}|{user}")
    record = json.loads(redis_client.lindex(buffer, 0))
    assert record["source"] == "search"
    buffered = {_key(uuid.UUID(record["ids"][i]), uuid.UUID(record["ids"][j]))
                for i, j in record["pairs"]}  # fmt: skip
    expected = {_key(a, b) for i, a in enumerate(returned) for b in returned[i + 1 :]}
    assert buffered == expected

    report = apply_pending(settings, redis_client)
    assert (report.records, report.coactivations, report.edges, report.created) == (1, 3, 3, 3)
    assert report.skipped == 0
    assert redis_client.llen(buffer) == 0
    assert not redis_client.sismember(pending_key(keys), f"{tenant}|{user}")
    edges = _edges(tenant)
    assert set(edges) == expected  # the fourth memory, never returned with them, has no edge
    for edge in edges.values():
        assert edge.user_id == user and edge.origin == "hebbian" and edge.co_activations == 1
        assert edge.weight == pytest.approx(settings.hebbian_rate)

    # Two more identical searches, one apply: each edge gets the closed form for n = 2 on top.
    assert run_search() == returned and run_search() == returned
    report = apply_pending(settings, redis_client)
    assert (report.records, report.coactivations, report.pairs, report.created) == (2, 6, 3, 0)
    for edge in _edges(tenant).values():
        assert edge.co_activations == 3
        assert edge.weight == pytest.approx(strengthen(0.0, settings.hebbian_rate, 3))

    # Nothing left: applying again changes nothing.
    assert apply_pending(settings, redis_client).records == 0
    assert all(e.co_activations == 3 for e in _edges(tenant).values())

    # A search returning a single memory has no pair to buffer.
    search(
        tenant,
        SearchRequest(user_id=user, query="office printer invoice", limit=1),
        settings=settings,
        embedder=embedder,
        client=redis_client,
    )
    assert redis_client.llen(buffer) == 0


def test_context_assembly_buffers_the_memories_it_chose(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    embedder = get_embedder(settings, redis_client)
    user = "ines"
    stored = remember(
        tenant,
        RememberRequest(
            user_id=user,
            memories=[
                MemoryIn(content="Ines is allergic to shellfish."),
                MemoryIn(content="Ines prefers vegetarian restaurants near the river."),
            ],
        ),
        settings=settings,
        embedder=embedder,
    )
    assemble_context(
        tenant,
        ContextRequest(user_id=user, query="book a dinner table for Ines"),
        settings=settings,
        embedder=embedder,
        client=redis_client,
    )
    buffer = buffer_key(RedisKeys.from_settings(settings), tenant, user)
    record = json.loads(redis_client.lindex(buffer, 0))
    assert record["source"] == "context"
    assert {uuid.UUID(i) for i in record["ids"]} == {r.id for r in stored}
    assert apply_pending(settings, redis_client).edges == 1


def test_weights_converge_to_one_and_never_pass_it(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    settings = settings.model_copy(update={"hebbian_rate": 0.3})
    a, b = _memories(tenant, "olga", 2)
    weights = []
    for times in (1, 1, 3, 10, 40, 200):
        _record(redis_client, settings, tenant, "olga", [a, b], times=times)
        apply_pending(settings, redis_client)
        weights.append(_edges(tenant)[_key(a, b)].weight)
    total = 0
    for times, weight in zip((1, 1, 3, 10, 40, 200), weights, strict=True):
        total += times
        assert weight == pytest.approx(strengthen(0.0, 0.3, total), abs=1e-12)
    assert weights == sorted(weights)
    assert all(0 < w <= 1.0 for w in weights)
    assert weights[-1] == pytest.approx(1.0, abs=1e-12)
    # Further co-activations at the top stay at (at most) 1: the check constraint never trips.
    _record(redis_client, settings, tenant, "olga", [a, b], times=50)
    apply_pending(settings, redis_client)
    edge = _edges(tenant)[_key(a, b)]
    assert edge.weight <= 1.0 and edge.co_activations == 305


def test_only_the_users_own_edges_change_and_a_forgotten_memory_is_skipped(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    other_tenant = f"{tenant}-b"
    mine = _memories(tenant, "uma", 4)
    theirs = _memories(tenant, "vera", 2)
    elsewhere = _memories(other_tenant, "uma", 2)
    _record(redis_client, settings, tenant, "vera", theirs)
    _record(redis_client, settings, other_tenant, "uma", elsewhere)
    assert apply_pending(settings, redis_client).edges == 2
    before = {**_edges(tenant), **_edges(other_tenant)}

    # A pair naming another user's memory, a pair naming a deleted memory: both skipped.
    with unit_of_work(tenant) as session:
        session.execute(text("DELETE FROM semantic.memories WHERE id = :id"), {"id": mine[3]})
    _record(redis_client, settings, tenant, "uma", [mine[0], mine[1]])
    _record(redis_client, settings, tenant, "uma", [mine[0], theirs[0]])
    _record(redis_client, settings, tenant, "uma", [mine[2], mine[3]])
    report = apply_pending(settings, redis_client)
    assert (report.pairs, report.edges, report.skipped) == (3, 1, 2)

    after = {**_edges(tenant), **_edges(other_tenant)}
    assert set(after) == set(before) | {_key(mine[0], mine[1])}
    for key, edge in before.items():
        assert after[key] == edge  # untouched
    assert after[_key(mine[0], mine[1])].user_id == "uma"


def test_two_appliers_at_once_apply_each_buffered_pair_once(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    # Small batches, so each applier would interleave many LRANGE/commit/LTRIM rounds.
    settings = settings.model_copy(update={"hebbian_batch": 100, "hebbian_max_pairs": 10})
    users = {u: _memories(tenant, u, 5) for u in ("wim", "xia")}
    records = 180
    for user, ids in users.items():
        _record(redis_client, settings, tenant, user, ids, times=records)  # 10 pairs each
    barrier = threading.Barrier(2)
    reports: list[Any] = []
    errors: list[BaseException] = []

    def applier() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                reports.append(apply_pending(settings, redis_client))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=applier) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sum(r.records for r in reports) == 2 * records
    assert sum(r.coactivations for r in reports) == 2 * records * 10
    edges = _edges(tenant)
    assert len(edges) == 20
    for edge in edges.values():
        assert edge.co_activations == records
        assert edge.weight == pytest.approx(strengthen(0.0, settings.hebbian_rate, records))


def test_a_replayed_batch_stays_bounded(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    """A crash between the commit and the trim applies that batch twice: the edge gains the
    replayed co-activations, and its weight still never passes 1."""
    a, b = _memories(tenant, "yuri", 2)
    at = datetime.now(UTC)
    first = hebbian_sql.Coactivation(*_key(a, b), 5, at)
    for _ in range(3):
        with unit_of_work(tenant) as session:
            hebbian_sql.apply_coactivations(session, tenant, "yuri", [first], rate=0.9)
    edge = _edges(tenant)[_key(a, b)]
    assert edge.co_activations == 15 and 0 < edge.weight <= 1.0


def test_the_upsert_merges_reversed_and_repeated_pairs(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    a, b = _memories(tenant, "yan", 2)
    early, late = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
    with unit_of_work(tenant) as session:
        applied = hebbian_sql.apply_coactivations(
            session,
            tenant,
            "yan",
            [(b, a, 2, late), (str(a), str(b), 3, early), (a, a, 4, NOW), (a, b, 0, NOW)],
            rate=0.2,
        )
    assert (applied.pairs, applied.edges, applied.created, applied.skipped) == (1, 1, 1, 0)
    edge = _edges(tenant)[_key(a, b)]
    assert edge.co_activations == 5 and edge.last_activated_at == late
    assert edge.weight == pytest.approx(strengthen(0.0, 0.2, 5))


def test_an_unreadable_record_is_dropped_and_does_not_block_the_buffer(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    keys = RedisKeys.from_settings(settings)
    ids = _memories(tenant, "zed", 2)
    buffer = buffer_key(keys, tenant, "zed")
    redis_client.rpush(buffer, b"not json", json.dumps({"ids": ["nope"], "pairs": [[0, 0]]}))
    _record(redis_client, settings, tenant, "zed", ids)
    report = apply_pending(settings, redis_client)
    assert (report.unreadable, report.records, report.edges) == (2, 1, 1)
    assert redis_client.llen(buffer) == 0


def test_a_search_still_answers_when_redis_is_down(
    settings: Settings, redis_client: redis.Redis, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = get_embedder(settings, redis_client)
    remember(
        tenant,
        RememberRequest(
            user_id="kai",
            memories=[
                MemoryIn(content="Kai rides a red bicycle to work."),
                MemoryIn(content="Kai's bicycle has a broken bell."),
            ],
        ),
        settings=settings,
        embedder=embedder,
    )

    class Down:
        def pipeline(self, *args: Any, **kwargs: Any) -> Any:
            raise redis.ConnectionError("Redis is down")

    result = search(
        tenant,
        SearchRequest(user_id="kai", query="Kai's bicycle", limit=5),
        settings=settings,
        embedder=embedder,
        client=Down(),  # type: ignore[arg-type]
    )
    assert len([h for h in result.hits if h.layer == "memory"]) == 2
    assert "co-activation not recorded" in caplog.text


# -- weakening ----------------------------------------------------------------------------


def test_weaken_lowers_stale_edges_once_per_period_and_prunes_under_the_floor(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    settings = settings.model_copy(update={"hebbian_weaken": 0.1, "hebbian_floor": 0.05})
    other_tenant = f"{tenant}-b"
    m = _memories(tenant, "zoe", 5)
    n = _memories(tenant, "abe", 2)
    o = _memories(other_tenant, "zoe", 2)
    long_ago = NOW - timedelta(days=10)
    _record(redis_client, settings, tenant, "zoe", m[:4], at=long_ago)  # 6 pairs
    _record(redis_client, settings, tenant, "abe", n, at=long_ago)
    _record(redis_client, settings, other_tenant, "zoe", o, at=long_ago)
    apply_pending(settings, redis_client)
    stale, weak, fresh = _key(m[0], m[1]), _key(m[0], m[2]), _key(m[0], m[3])
    entity = _key(m[1], m[2])
    _set_edge(tenant, *weak, weight=0.052)  # 0.052 · 0.9 < 0.05: pruned
    _set_edge(tenant, *fresh, last_activated_at=NOW - timedelta(hours=1))
    _set_edge(tenant, *entity, origin="entity")
    _set_edge(tenant, *stale, weight=0.5)
    start = _edges(tenant)
    elsewhere = _edges(other_tenant)

    report = weaken(settings, tenant, NOW)
    assert report.skipped is None and report.tick == tick_of(NOW, hebbian.WEAKEN_PERIOD_S)
    after = _edges(tenant)
    assert weak not in after
    assert after[stale].weight == pytest.approx(0.45)
    assert after[fresh].weight == start[fresh].weight  # co-activated within the period
    assert after[entity].weight == start[entity].weight  # not a Hebbian edge
    assert after[_key(*n)].weight == pytest.approx(start[_key(*n)].weight * 0.9)  # other user
    assert (report.weakened, report.pruned) == (4, 1)  # stale, 2 more of zoe's, abe's; weak
    assert _edges(other_tenant) == elsewhere  # another tenant: untouched

    # Same period again (a second beat, a retried task): nothing more.
    again = weaken(settings, tenant, NOW + timedelta(hours=3))
    assert again.skipped == "done"
    assert _edges(tenant) == after

    # The next period: the edge co-activated an hour before NOW still counts as recent
    # (within the period before that tick); the one after, it weakens too.
    weaken(settings, tenant, NOW + timedelta(days=1))
    assert _edges(tenant)[fresh].weight == start[fresh].weight
    weaken(settings, tenant, NOW + timedelta(days=2))
    later = _edges(tenant)
    assert later[stale].weight == pytest.approx(0.5 * 0.9**3)
    assert later[fresh].weight == pytest.approx(after[fresh].weight * 0.9)


def test_a_weakening_that_stops_part_way_resumes_without_weakening_twice(
    settings: Settings, redis_client: redis.Redis, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings.model_copy(
        update={"hebbian_weaken": 0.5, "hebbian_floor": 0.0, "hebbian_batch": 100}
    )
    ids = _memories(tenant, "bo", 25)  # 300 pairs: three full batches and an empty one
    _record(redis_client, settings.model_copy(update={"hebbian_max_pairs": 1000}), tenant,
            "bo", ids, at=NOW - timedelta(days=5))  # fmt: skip
    apply_pending(settings, redis_client)
    start = _edges(tenant)
    assert len(start) == 300

    real = hebbian_sql.weaken_and_prune
    calls = {"n": 0}

    def crashing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("worker lost")
        return real(*args, **kwargs)

    monkeypatch.setattr(hebbian.hebbian_sql, "weaken_and_prune", crashing)
    with pytest.raises(RuntimeError):
        weaken(settings, tenant, NOW)
    monkeypatch.setattr(hebbian.hebbian_sql, "weaken_and_prune", real)
    halfway = _edges(tenant)
    assert sum(1 for k in start if halfway[k].weight < start[k].weight) == 200

    resumed = weaken(settings, tenant, NOW)
    assert resumed.resumed and resumed.weakened == 100
    end = _edges(tenant)
    for key, edge in start.items():
        assert end[key].weight == pytest.approx(edge.weight * 0.5)
    with unit_of_work(tenant) as session:
        statuses = session.execute(
            text("SELECT status FROM meta.job_runs WHERE job = 'hebbian.weaken'")
        ).scalars()
        assert sorted(statuses) == ["done", "failed"]


# -- forgetting ---------------------------------------------------------------------------


def test_forgetting_the_user_removes_their_buffer(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    keys = RedisKeys.from_settings(settings)
    ids = _memories(tenant, "cy", 3)
    _record(redis_client, settings, tenant, "cy", ids)
    buffer = buffer_key(keys, tenant, "cy")
    assert redis_client.exists(buffer)
    assert buffer.encode() in set(redis_client.scan_iter(match=keys.user_pattern(tenant, "cy")))
    # Another user's buffer stays.
    others = _memories(tenant, "cyd", 2)
    _record(redis_client, settings, tenant, "cyd", others)

    forget_user(tenant_id=tenant, user_id="cy", settings=settings, client=redis_client)
    assert not redis_client.exists(buffer)
    assert redis_client.exists(buffer_key(keys, tenant, "cyd"))
    report = apply_pending(settings, redis_client)
    assert report.edges == 1  # cyd's pair; cy left nothing behind
    assert not redis_client.smembers(pending_key(keys))


# -- many co-activations at once (their speed is measured by bench/maintenance.py) ---------


def test_many_coactivations_are_all_applied(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    ids = _memories(tenant, "dee", 60)
    keys = RedisKeys.from_settings(settings)
    pipe = redis_client.pipeline(transaction=False)
    records = 400
    for r in range(records):  # rotating top-10s: 45 pairs each, 18,000 firings in all
        top = [ids[(r * 7 + k) % 60] for k in range(10)]
        found = [(i, j) for j in range(1, 10) for i in range(j)]
        record = {"ids": [str(t) for t in top], "pairs": found, "source": "test",
                  "at": NOW.isoformat()}  # fmt: skip
        pipe.rpush(buffer_key(keys, tenant, "dee"), json.dumps(record))
    pipe.sadd(pending_key(keys), f"{tenant}|dee")
    pipe.execute()
    report = apply_pending(settings, redis_client)
    assert report.coactivations == records * 45
    edges = _edges(tenant)
    assert sum(e.co_activations for e in edges.values()) == records * 45
    assert report.created == len(edges)


def test_deleting_a_memory_drops_its_edges_and_no_others(tenant: str) -> None:
    """Edges have no foreign key (its checks cost 44 % of a batch); the trigger keeps them
    consistent with the memories instead."""
    ids = sorted(uuid.uuid4() for _ in range(3))
    with unit_of_work(tenant) as session:
        for n, memory_id in enumerate(ids):
            session.execute(
                text(
                    "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
                    " content_hash, occurred_at, valid_from) VALUES (:id, :t, 'u1', 'fact',"
                    " :c, :h, now(), now())"
                ),
                {"id": memory_id, "t": tenant, "c": f"memory {n}", "h": f"h{n}"},
            )
        for a, b in ((ids[0], ids[1]), (ids[1], ids[2])):
            session.execute(
                text(
                    "INSERT INTO conceptual.associations (tenant_id, user_id, memory_a, memory_b,"
                    " weight) VALUES (:t, 'u1', :a, :b, 0.5)"
                ),
                {"t": tenant, "a": a, "b": b},
            )
    with unit_of_work(tenant) as session:
        session.execute(text("DELETE FROM semantic.memories WHERE id = :id"), {"id": ids[0]})
    with unit_of_work(tenant) as session:
        left = session.execute(text("SELECT memory_a, memory_b FROM conceptual.associations")).all()
    assert left == [(ids[1], ids[2])]
