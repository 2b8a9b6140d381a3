"""bench/search.py's load: COPY a corpus into semantic.memories with its secondary indexes
dropped, then rebuild them from the model's own definitions, VACUUM ANALYZE and refresh the
hot-memories view, timing each step (also used by bench/scale.py's search phase)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from _search_corpus import TENANT, TOPICS, Space, TextGen, user_name
from sqlalchemy import text

from app.config import Settings
from app.db.session import owner_engine
from app.layers.semantic.models import Memory

SUPERSEDED_SHARE = 0.03
COPY_CHUNK = 5000


@dataclass
class Loaded:
    load_s: float
    index_build_s: float
    index_times: dict[str, float]
    index_notices: list[str]
    vacuum_s: float
    hot_refresh_s: float
    same_topic_cos: float
    cross_topic_cos: float
    query_topic_cos: float
    kept_indexes: list[str]


def _cosine_stats(vectors: np.ndarray, topics: np.ndarray) -> tuple[float, float]:
    sims = vectors @ vectors.T
    same = topics[:, None] == topics[None, :]
    off_diagonal = ~np.eye(len(topics), dtype=bool)
    return float(sims[same & off_diagonal].mean()), float(sims[~same].mean())


def _drop_indexes(settings: Settings) -> list[str]:
    """Drop the model's secondary indexes on semantic.memories; returns the other indexes
    (primary key, unique constraint, anything added outside the model), which stay."""
    model = {index.name for index in Memory.__table__.indexes}
    with owner_engine(settings).begin() as conn:
        present = conn.execute(
            text(
                "SELECT indexname FROM pg_indexes"
                " WHERE schemaname = 'semantic' AND tablename = 'memories'"
            )
        ).scalars()
        kept = []
        for name in present:
            if name in model:
                conn.execute(text(f'DROP INDEX semantic."{name}"'))
            else:
                kept.append(name)
    return kept


def _build_indexes(settings: Settings, work_mem: str) -> tuple[dict[str, float], list[str]]:
    """Seconds per index, and the server's notices (pgvector says when the HNSW graph
    outgrows maintenance_work_mem)."""
    times: dict[str, float] = {}
    notices: list[str] = []
    with owner_engine(settings).connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None

        def on_notice(notice: Any) -> None:
            notices.append(str(notice.message_primary))

        driver.add_notice_handler(on_notice)
        conn.execute(
            text("SELECT set_config('maintenance_work_mem', :mem, false)"), {"mem": work_mem}
        )
        conn.execute(text("SET max_parallel_maintenance_workers = 1"))
        conn.commit()
        for index in sorted(Memory.__table__.indexes, key=lambda i: str(i.name)):
            started = time.perf_counter()
            index.create(conn)
            conn.commit()
            times[str(index.name)] = time.perf_counter() - started
        conn.execute(text("RESET maintenance_work_mem"))
        conn.execute(text("RESET max_parallel_maintenance_workers"))
        conn.commit()
        driver.remove_notice_handler(on_notice)
    return times, notices


def load(
    settings: Settings,
    sizes: np.ndarray,
    topics_by_user: list[np.ndarray],
    space: Space,
    seed: int,
    work_mem: str,
) -> Loaded:
    """COPY every memory into semantic.memories (rows of all users interleaved, in time
    order, as they would have arrived), then rebuild the indexes."""
    rng = np.random.default_rng(seed + 1)
    gen = TextGen(seed + 2)
    total = int(sizes.sum())
    owner_of_row = rng.permutation(np.repeat(np.arange(len(sizes), dtype=np.int32), sizes))
    topic_of_row = np.empty(total, dtype=np.int32)
    topic_of_row[np.argsort(owner_of_row, kind="stable")] = np.concatenate(topics_by_user)
    now = datetime.now(UTC) - timedelta(hours=1)
    start = now - timedelta(days=365)
    offsets = np.sort(rng.uniform(0, 365 * 86_400, size=total))
    importance = np.round(rng.beta(2, 3, size=total), 4)
    consolidation = np.round(rng.uniform(0, 0.5, size=total), 4)
    access = rng.poisson(1.0, size=total)
    superseded = rng.random(total) < SUPERSEDED_SHARE
    channels = np.array(["web", "slack", "voice"])[rng.integers(0, 3, size=total)]
    vector_format = "[" + ",".join(["%.5g"] * space.dim) + "]"
    columns = (
        "id, tenant_id, user_id, kind, content, topics, tags, importance,"
        " consolidation_strength, access_count, occurred_at, valid_from, valid_to,"
        " content_hash, extractor, embedding, channel"
    )
    seen: set[bytes] = set()
    sample_vectors: np.ndarray | None = None

    tenants = {"t": TENANT}
    with owner_engine(settings).begin() as conn:
        conn.execute(
            text("INSERT INTO meta.tenants (tenant_id) VALUES (:t) ON CONFLICT DO NOTHING"), tenants
        )
    kept = _drop_indexes(settings)

    started = time.perf_counter()
    raw = owner_engine(settings).raw_connection()
    try:
        pg = raw.driver_connection
        assert pg is not None
        with pg.cursor() as cur, cur.copy(f"COPY semantic.memories ({columns}) FROM STDIN") as copy:
            for chunk_start in range(0, total, COPY_CHUNK):
                rows = range(chunk_start, min(total, chunk_start + COPY_CHUNK))
                vectors = space.sample(topic_of_row[rows.start : rows.stop], rng)
                if sample_vectors is None:
                    sample_vectors = vectors[:2000]
                for row, vector in zip(rows, vectors.tolist(), strict=True):
                    user = user_name(int(owner_of_row[row]))
                    topic = int(topic_of_row[row])
                    kind, content = gen.memory(topic)
                    digest = hashlib.sha256(f"{user}\x1f{content}".encode()).digest()[:12]
                    while digest in seen:  # same sentence twice for one user: say it apart
                        content = f"{content} (again, {gen.rng.randint(2, 99)})"
                        digest = hashlib.sha256(f"{user}\x1f{content}".encode()).digest()[:12]
                    seen.add(digest)
                    occurred = start + timedelta(seconds=float(offsets[row]))
                    valid_to = (
                        min(now, occurred + timedelta(days=float(rng.uniform(1, 60))))
                        if superseded[row]
                        else None
                    )
                    category, subject = TOPICS[topic]
                    copy.write_row(
                        (
                            uuid.uuid4(),
                            TENANT,
                            user,
                            kind,
                            content,
                            json.dumps([subject]),
                            [category],
                            float(importance[row]),
                            float(consolidation[row]),
                            int(access[row]),
                            occurred,
                            occurred,
                            valid_to,
                            hashlib.sha256(content.encode()).hexdigest(),
                            "bench",
                            vector_format % tuple(vector),
                            str(channels[row]),
                        )
                    )
                if total >= 200_000 and (rows.stop // COPY_CHUNK) % 40 == 0:
                    print(f"  copied {rows.stop:,} rows", flush=True)
        pg.commit()
    finally:
        raw.close()
    load_s = time.perf_counter() - started

    started = time.perf_counter()
    index_times, notices = _build_indexes(settings, work_mem)
    index_build_s = time.perf_counter() - started

    started = time.perf_counter()
    with owner_engine(settings).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE semantic.memories"))
    vacuum_s = time.perf_counter() - started
    started = time.perf_counter()
    with owner_engine(settings).begin() as conn:
        conn.execute(text("REFRESH MATERIALIZED VIEW meta.hot_memories_mv"))
    hot_refresh_s = time.perf_counter() - started

    assert sample_vectors is not None
    sample_topics = topic_of_row[: len(sample_vectors)]
    same, cross = _cosine_stats(sample_vectors, sample_topics)
    probe = space.sample(sample_topics[:200], np.random.default_rng(seed + 3))
    query_same = float(np.mean(np.sum(probe * sample_vectors[:200], axis=1)))
    return Loaded(
        load_s=load_s,
        index_build_s=index_build_s,
        index_times=index_times,
        index_notices=notices,
        vacuum_s=vacuum_s,
        hot_refresh_s=hot_refresh_s,
        same_topic_cos=same,
        cross_topic_cos=cross,
        query_topic_cos=query_same,
        kept_indexes=kept,
    )
