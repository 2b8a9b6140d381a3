"""Background cognition at scale: decay, Hebbian learning, a dream cycle, the view refresh.

Loads synthetic rows with COPY into its own database (`engram_bench_maintenance`): by default
1,000,000 memories of 1,000 users in 10 tenants and 2,000,000 association edges between
memories of the same user, plus 50,000 recent access patterns. Only the users the dream
cycle visits get embeddings (clustered synthetic vectors): the embedder is not what this
measures. Then it times, one after the other (never two at once):

* one decay pass over every tenant (set-based page-range batches, `app/services/decay.py`);
* the same decay written the obvious way — ORM objects loaded, changed in Python and flushed
  row by row — over a 10,000-memory sample, reported as the per-row ratio to the set pass;
* one Hebbian batch: 100,000 co-activations buffered in Redis, then applied;
* one dream cycle for 100 users (`run_dream`);
* one `REFRESH MATERIALIZED VIEW CONCURRENTLY` of the hot-memories view.

Last line: `maintenance decay_1m_s=<N> hebbian_100k_s=<N> dream_100u_s=<N> refresh_s=<N>
orm_vs_set_ratio=<N>`
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench_maintenance")
os.environ["ENGRAM_REDIS_PREFIX"] = f"benchm-{os.getpid()}"

import numpy as np
from sqlalchemy import select, text

from app.cli.supervisor import fresh_database
from app.config import Settings, get_settings
from app.db.session import owner_engine, unit_of_work
from app.keys import RedisKeys
from app.layers.conceptual.models import Association
from app.layers.semantic.models import Memory
from app.redis_client import get_redis
from app.scoring.decay import decayed, half_life_days
from app.services import decay
from app.services.dream import run_dream
from app.services.hebbian import apply_pending, record_coactivation
from app.services.meta_refresh import refresh_hot_memories

WORDS = [
    "budget",
    "deploy",
    "invoice",
    "meeting",
    "Lisbon",
    "Postgres",
    "Redis",
    "offsite",
    "review",
    "vendor",
    "contract",
    "launch",
    "release",
    "roadmap",
    "hiring",
    "dinner",
    "flight",
    "hotel",
    "report",
    "migration",
    "incident",
]
DIM = 384


def _copy(table: str, columns: str, rows: io.StringIO) -> None:
    raw = owner_engine().raw_connection()
    try:
        cursor = raw.cursor()
        rows.seek(0)
        with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:  # type: ignore[attr-defined]
            while chunk := rows.read(1 << 20):
                copy.write(chunk)
        raw.commit()
    finally:
        raw.close()


def _drop_secondary_indexes(model: type) -> list[object]:
    table = model.__table__  # type: ignore[attr-defined]
    with owner_engine().begin() as conn:
        for index in table.indexes:
            conn.execute(text(f'DROP INDEX IF EXISTS {table.schema}."{index.name}"'))
    return list(table.indexes)


def _create_indexes(indexes: list[object]) -> None:
    with owner_engine().connect() as conn:
        conn.execute(text("SET maintenance_work_mem = '1GB'"))
        for index in indexes:
            index.create(conn)  # type: ignore[attr-defined]
            conn.commit()


def load(
    args: argparse.Namespace, rng: np.random.Generator, now: datetime
) -> tuple[list[str], dict[tuple[str, str], np.ndarray]]:
    """COPY memories, associations and access patterns; returns the tenants and each dream
    user's memory ids."""
    tenants = [f"bench-m{t:02d}" for t in range(args.tenants)]
    per_user = args.memories // args.users
    users = [(tenants[u % len(tenants)], f"user-{u:05d}") for u in range(args.users)]
    dream_users = users[: args.dream_users]
    with owner_engine().begin() as conn:
        for tenant in tenants:
            conn.execute(text("INSERT INTO meta.tenants (tenant_id) VALUES (:t)"), {"t": tenant})
    ids = {user: np.array([uuid.uuid4() for _ in range(per_user)]) for user in users}
    centroids = rng.normal(size=(40, DIM)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)

    started = time.perf_counter()
    indexes = _drop_secondary_indexes(Memory)
    buffer = io.StringIO()
    age = rng.uniform(0, 365, size=args.memories)
    importance = rng.beta(2, 3, size=args.memories)
    access = rng.poisson(1.0, size=args.memories)
    emotion = rng.uniform(0, 0.6, size=args.memories)
    n = 0
    for user in users:
        tenant, user_id = user
        vectors = None
        if user in dream_users:
            topics = rng.integers(0, len(centroids), size=per_user)
            noise = rng.normal(scale=0.01, size=(per_user, DIM)).astype(np.float32)
            vectors = centroids[topics] + noise
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for i, memory_id in enumerate(ids[user]):
            at = (now - timedelta(days=float(age[n]))).isoformat()
            words = " ".join(WORDS[(n * 7 + k * 3) % len(WORDS)] for k in range(6))
            embedding = (
                "[" + ",".join(f"{x:.5f}" for x in vectors[i]) + "]"
                if vectors is not None
                else r"\N"
            )
            buffer.write(
                f"{memory_id}\t{tenant}\t{user_id}\tfact\t{words} number {n}\t{uuid.uuid4().hex}"
                f"\t{importance[n]:.4f}\t{emotion[n]:.4f}\t{access[n]}\t{at}\t{at}\t{at}"
                f"\t{at}\t{embedding}\n"
            )
            n += 1
    _copy(
        "semantic.memories",
        "id, tenant_id, user_id, kind, content, content_hash, importance, emotional_intensity,"
        " access_count, occurred_at, valid_from, created_at, last_accessed_at, embedding",
        buffer,
    )
    loaded = time.perf_counter() - started
    _create_indexes(indexes)
    built = time.perf_counter() - started - loaded
    print(f"memories: {n:,} loaded in {loaded:.1f}s, indexes {built:.1f}s")

    started = time.perf_counter()
    edge_indexes = _drop_secondary_indexes(Association)
    buffer = io.StringIO()
    per_user_edges = args.edges // args.users
    written = 0
    for user in users:
        tenant, user_id = user
        pool = ids[user]
        a = rng.integers(0, len(pool), size=per_user_edges * 2)
        b = rng.integers(0, len(pool), size=per_user_edges * 2)
        seen: set[tuple[int, int]] = set()
        for x, y in zip(a, b, strict=True):
            if x == y:
                continue
            lo, hi = sorted((pool[x], pool[y]))
            key = (lo.int, hi.int)
            if key in seen:
                continue
            seen.add(key)
            weight = rng.uniform(0.02, 0.9)
            buffer.write(f"{tenant}\t{user_id}\t{lo}\t{hi}\t{weight:.4f}\t1\t{now.isoformat()}\n")
            written += 1
            if len(seen) >= per_user_edges:
                break
    _copy(
        "conceptual.associations",
        "tenant_id, user_id, memory_a, memory_b, weight, co_activations, last_activated_at",
        buffer,
    )
    _create_indexes(edge_indexes)
    print(f"associations: {written:,} in {time.perf_counter() - started:.1f}s")

    buffer = io.StringIO()
    for k in range(args.access_patterns):
        tenant, user_id = users[k % len(users)]
        hits = "{" + ",".join(str(m) for m in rng.choice(ids[(tenant, user_id)], 5)) + "}"
        at = (now - timedelta(hours=float(rng.uniform(0, 24 * 10)))).isoformat()
        buffer.write(
            f"{uuid.uuid4()}\t{tenant}\t{user_id}\tweb\tquery {k}\tq{k}\t{hits}"
            f"\t{{0.5,0.4,0.3,0.2,0.1}}\t{k % 24}\t{at}\n"
        )
    _copy(
        "meta.access_patterns",
        "id, tenant_id, user_id, channel, query, query_hash, hit_ids, scores, hour_of_day,"
        " created_at",
        buffer,
    )
    with owner_engine().connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    return tenants, {user: ids[user] for user in dream_users}


def orm_decay(settings: Settings, tenant: str, tick: datetime, sample: int) -> tuple[float, int]:
    """The obvious way: load ORM objects, compute in Python, flush; seconds and rows."""
    started = time.perf_counter()
    with unit_of_work(tenant) as session:
        memories = session.scalars(
            select(Memory)
            .where(Memory.tenant_id == tenant, Memory.archived_at.is_(None))
            .limit(sample)
        ).all()
        for m in memories:
            since = max(m.decayed_at or m.created_at, m.last_accessed_at or m.created_at)
            h = half_life_days(
                settings.decay_half_life_days,
                access_count=m.access_count,
                emotional_intensity=m.emotional_intensity,
                consolidation=m.consolidation_strength,
            )
            m.importance = decayed(
                m.importance, idle_days=(tick - since).total_seconds() / 86_400, half_life=h
            )
            m.decayed_at = tick
            if m.importance < settings.decay_floor:
                m.archived_at = tick
            session.flush()  # row by row, as a naive loop over the ORM would
    return time.perf_counter() - started, len(memories)


def hebbian(
    settings: Settings,
    client: object,
    dream_users: dict[tuple[str, str], np.ndarray],
    coactivations: int,
    rng: np.random.Generator,
) -> float:
    """Buffer `coactivations` pair firings (searches returning memories together), then time
    applying them all."""
    keys = RedisKeys.from_settings(settings)
    users = list(dream_users)
    per_search = 10  # ten hits: 45 pairs, the default cap
    searches = max(1, coactivations // 45)
    for k in range(searches):
        tenant, user = users[k % len(users)]
        hits = rng.choice(dream_users[(tenant, user)], per_search, replace=False)
        record_coactivation(client, keys, tenant, user, list(hits), "search")  # type: ignore[arg-type]
    started = time.perf_counter()
    applied = 0
    while True:
        report = apply_pending(settings, client, max_users=len(users))  # type: ignore[arg-type]
        applied += report.coactivations
        if report.records == 0:
            break
    seconds = time.perf_counter() - started
    print(f"hebbian: {applied:,} co-activations applied in {seconds:.2f}s")
    return seconds


def dream(
    settings: Settings, dream_users: dict[tuple[str, str], np.ndarray], now: datetime
) -> float:
    """One dream cycle for each dream user, one after the other."""
    client = get_redis(settings)
    started = time.perf_counter()
    replays = clusters = 0
    for tenant, user in dream_users:
        report = run_dream(settings, tenant, user, now=now, client=client)
        replays += sum(len(c.replays) for c in report.cycles)
        clusters += sum(len(c.clusters) for c in report.cycles)
    seconds = time.perf_counter() - started
    print(
        f"dream: {len(dream_users)} users, {replays:,} replays, {clusters} clusters merged"
        f" in {seconds:.1f}s"
    )
    return seconds


def refresh(settings: Settings) -> float:
    started = time.perf_counter()
    result = refresh_hot_memories(settings, reason="benchmark")
    seconds = time.perf_counter() - started
    print(f"refresh: {result.rows if result else 0:,} hot memories in {seconds:.2f}s")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--dream-users", type=int, default=100)
    parser.add_argument("--coactivations", type=int, default=100_000)
    parser.add_argument("--access-patterns", type=int, default=50_000)
    parser.add_argument("--orm-sample", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()

    settings = get_settings()
    services = fresh_database(settings)
    client = get_redis(settings)
    rng = np.random.default_rng(args.seed)
    now = datetime.now(UTC).replace(microsecond=0)
    tenants, dream_users = load(args, rng, now)

    tick = decay.tick_of(now, settings.decay_interval_s)
    started = time.perf_counter()
    decayed_rows = (decay.decay_pass(settings, tick) or (0, 0))[0]
    decay_s = time.perf_counter() - started
    print(
        f"decay: {decayed_rows:,} memories in {decay_s:.2f}s ({decayed_rows / decay_s:,.0f} rows/s)"
    )

    orm_s, orm_rows = orm_decay(settings, tenants[0], tick + timedelta(hours=1), args.orm_sample)
    ratio = (orm_s / orm_rows) / (decay_s / decayed_rows)
    print(
        f"ORM row by row: {orm_rows:,} memories in {orm_s:.2f}s; per row {ratio:.0f}x the set pass"
    )

    hebbian_s = hebbian(settings, client, dream_users, args.coactivations, rng)
    dream_s = dream(settings, dream_users, now)
    refresh_s = refresh(settings)

    keys = list(client.scan_iter(match=f"{RedisKeys.from_settings(settings).prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    services.stop()
    print(
        f"maintenance decay_1m_s={decay_s:.2f} hebbian_100k_s={hebbian_s:.2f}"
        f" dream_100u_s={dream_s:.2f} refresh_s={refresh_s:.2f} orm_vs_set_ratio={ratio:.0f}"
    )


if __name__ == "__main__":
    main()
