"""Search benchmark: latency of hybrid search, context assembly and prefetch over a skewed L3,
and the recall of the HNSW index under the per-user filter.

Data. N memories (default 100,000; --large 1,000,000; --memories N) for --users users (default
1,000) of one tenant, sized by a Zipf law (exponent --skew, default 1): a few users hold
thousands of memories and most hold tens, so both plans of the user-filtered dense query are
exercised (the user's rows through a btree and sorted exactly; the HNSW graph with pgvector's
iterative scan). Text comes from a deterministic generator (templates over people, places,
tools, hobbies, foods, work projects and numbers; every memory belongs to one of 200 topics,
and each user writes mostly about a few favourite topics), so full-text search ranks real
words. EMBEDDINGS ARE SYNTHETIC, clustered like sentence embeddings: 200 topic centroids
(random unit vectors that share a common direction, fixed seed), memory vector =
normalise(centroid + noise), with the noise scaled so that same-topic cosine is about 0.6 and
cross-topic about 0.1 (the measured averages are printed). 3 % of memories are superseded
(valid_to set), which the default search filter drops. Rows go in with COPY while the table's
secondary indexes are dropped; the indexes are then rebuilt from the model's own definitions
(load_s, index_build_s), the table is VACUUM ANALYZEd and the hot-memories view refreshed.

Measured in this process through the Python service layer (no HTTP), one call at a time:
  * search(): --queries queries (default 2,000, after 50 warm-up calls); the first half for
    users drawn uniformly (the realistic "many small users" case), the second half for users
    drawn in proportion to their size. A query is a paraphrase on the topic of one of the
    user's memories; its vector, normalise(topic centroid + noise), is served by an in-process
    embedder, so these figures are the retrieval path alone (embed_p50_ms is what a real
    query's model adds).
  * assemble_context(): 500 queries for users given a few live working-memory turns first,
    with nothing prefetched (the search path).
  * prefetch: for 200 users, prefetch() and then assemble_context() right away, which must be
    served from the prefetched entry (prefetch == "hit").
  * ANN recall@10: 300 queries (half uniform, half by size, so the big users are in):
    dense_candidates() through the index vs the same with exact=True, overall and for users
    with more than 2,000 memories; also recall at the candidate count search() itself asks
    for, and EXPLAIN ANALYZE of the dense query for the largest, a mid-sized and the median
    user (which index each plan uses).
  * the real local model's cost of embedding one query (200 distinct queries).
Own database (`engram_bench_search`) and Redis prefix. Refuses to run against DATABASE_URL:
it drops and rebuilds the memories' indexes.

Last line: `search p50_ms=<N> p95_ms=<N> p99_ms=<N> context_p95_ms=<N> ann_recall_at_10=<N> ...`
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench_search")
os.environ["ENGRAM_REDIS_PREFIX"] = f"benchs-{os.getpid()}"

import numpy as np
import psycopg
from sqlalchemy import text

from app.cli.supervisor import fresh_database
from app.config import Settings, get_settings
from app.db.session import owner_engine, unit_of_work
from app.embedding.base import Owner
from app.embedding.factory import local_embedder
from app.layers.semantic.models import Memory
from app.layers.semantic.search import MemoryFilter, dense_candidates
from app.layers.working.store import WorkingMemoryStore, WorkingTurn
from app.redis_client import get_redis
from app.scoring.procedural import normalise_pattern
from app.services.context import ContextRequest, assemble_context
from app.services.prefetch import cached, prefetch
from app.services.search import SearchRequest, search
from app.text.tokens import count_tokens

TENANT = "bench-search"
BIG_USER = 2000  # users above this many memories are reported apart
SUPERSEDED_SHARE = 0.03
SHARED_DIRECTION = 0.4  # weight of the direction all centroids share (cross-topic cosine)
NOISE_NORM = math.sqrt(0.6)  # |noise| / |centroid|: same-topic cosine ≈ 1 / (1 + 0.6)
COPY_CHUNK = 5000

# -- text ------------------------------------------------------------------------------------

PEOPLE = [
    "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal",
    "Lucia", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Ulla",
    "Vera", "Wen", "Yusuf", "Zoe",
]  # fmt: skip
CITIES = [
    "Lisbon", "Berlin", "Austin", "Nairobi", "Oslo", "Madrid", "Toronto", "Melbourne",
    "Munich", "Prague", "Warsaw", "Boston",
]  # fmt: skip
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip
SUBJECTS: dict[str, list[str]] = {
    "hobby": [
        "bouldering", "sourdough baking", "trail running", "chess openings", "birdwatching",
        "watercolour painting", "jazz piano", "sea kayaking", "pottery", "amateur astronomy",
        "beekeeping", "salsa dancing", "woodworking", "fly fishing", "urban sketching",
        "mountain biking", "bonsai", "film photography", "rock climbing", "surfing",
        "knitting", "homebrewing", "calligraphy", "archery", "scuba diving", "vegetable gardening",
        "marathon training", "yoga", "fencing", "origami", "bike touring", "skateboarding",
        "violin lessons", "poetry writing", "board games", "geocaching", "ice skating",
        "mushroom foraging", "improv comedy", "model trains",
    ],
    "tool": [
        "Postgres", "Redis", "Kubernetes", "Terraform", "Grafana", "Kafka", "FastAPI", "React",
        "Django", "Airflow", "Elasticsearch", "Prometheus", "Ansible", "Jenkins", "GitLab",
        "Snowflake", "Spark", "RabbitMQ", "Nginx", "Vault", "Docker", "Helm", "Datadog",
        "Sentry", "Celery", "Flutter", "Svelte", "Rust", "Golang", "TypeScript", "PyTorch",
        "Pandas", "BigQuery", "DynamoDB", "Cassandra", "ClickHouse", "Istio", "ArgoCD",
        "Pulumi", "Tailscale",
    ],
    "place": [
        "Porto", "Kyoto", "Lima", "Reykjavik", "Marrakesh", "Hanoi", "Montreal", "Tbilisi",
        "Cape Town", "Valparaiso", "Ljubljana", "Seville", "Edinburgh", "Tallinn", "Krakow",
        "Istanbul", "Bogota", "Hobart", "Queenstown", "Vancouver", "Lyon", "Naples", "Athens",
        "Helsinki", "Dublin", "Seoul", "Taipei", "Singapore", "Mumbai", "Cairo", "Zanzibar",
        "Havana", "Cusco", "Bergen", "Tromso", "Granada", "Dubrovnik", "Bruges", "Salzburg",
        "Kathmandu",
    ],
    "food": [
        "vegan curry", "gluten-free bread", "ramen", "espresso", "green tea", "keto meals",
        "intermittent fasting", "sushi", "dark chocolate", "oat milk", "kimchi", "tacos",
        "neapolitan pizza", "lentil soup", "protein shakes", "smoothies", "paella", "dumplings",
        "cheese boards", "mezze", "pho", "falafel", "risotto", "barbecue ribs", "granola",
        "matcha", "craft beer", "natural wine", "cold brew", "tofu stir fry", "peanuts",
        "lactose", "sugar-free snacks", "fermented foods", "meal prep", "mediterranean diet",
        "bagels", "croissants", "hot sauce", "shellfish",
    ],
    "project": [
        "billing migration", "onboarding flow", "mobile app redesign", "quarterly roadmap",
        "hiring pipeline", "churn analysis", "data warehouse", "security audit", "pricing page",
        "API rate limits", "search relevance", "payment gateway", "incident review",
        "design system", "analytics dashboard", "invoice automation", "SSO rollout",
        "GDPR compliance", "performance review", "sales forecast", "partner integration",
        "support backlog", "release train", "feature flags", "load testing",
        "cloud cost optimisation", "accessibility audit", "localisation", "email campaign",
        "referral program", "inventory sync", "fraud detection", "recommendation engine",
        "chat widget", "status page", "backup policy", "observability stack",
        "vendor contract", "offsite planning", "board presentation",
    ],
}  # fmt: skip
MEMORY_TEMPLATES: dict[str, list[tuple[str, str]]] = {
    "hobby": [
        ("preference", "I really enjoy {s} on {d} mornings, usually for about {n} minutes."),
        ("goal", "My goal this year is to get better at {s}; {p} offered to coach me."),
        ("event", "Spent {n} minutes on {s} with {p} near {c} last {d}."),
        ("fact", "{p} got me into {s} back in {m}; we meet every other {d}."),
        ("todo", "Remind me to buy new gear for {s} before the {m} trip to {c}."),
        ("decision", "Decided to join a {s} club in {c}, membership is {n} euros a year."),
    ],
    "tool": [
        ("decision", "We decided to move {p}'s team service to {s} by {m}."),
        ("fact", "The {s} cluster in {c} handles about {n} requests per second."),
        ("preference", "I prefer {s} over {t} for new services; {p} agrees."),
        ("todo", "Upgrade {s} on the staging cluster before {d}, ticket {n}."),
        ("event", "{s} had an outage on {d} that lasted {n} minutes; {p} wrote the postmortem."),
        ("goal", "Goal: cut our {s} bill by {n} percent before {m}."),
    ],
    "place": [
        ("event", "Flew to {s} on {d} with {p}; the hotel was {n} euros a night."),
        ("preference", "In {s} I prefer staying near the old town, under {n} euros a night."),
        ("todo", "Book the train from {s} to {c} for the {m} conference."),
        ("fact", "{p} lives in {s} and works remotely for a company in {c}."),
        ("goal", "I want to spend {n} days in {s} next {m} and learn some of the language."),
        ("decision", "We chose {s} for the team offsite in {m}; the budget is {n} euros."),
    ],
    "food": [
        ("preference", "I love {s}, especially at the place {p} recommended in {c}."),
        ("fact", "{p} cannot have {s}; keep that in mind for the {m} dinner."),
        ("event", "Made {s} for {n} friends on {d}; {p} brought dessert."),
        ("goal", "Trying to have {s} at most {n} times a month."),
        ("todo", "Order {s} for the team lunch on {d}, about {n} people."),
        ("decision", "Decided to switch to {s} after talking to {p} in {m}."),
    ],
    "project": [
        ("decision", "For the {s} we decided to use {t} and ship by {m}."),
        ("todo", "Send {p} the {s} update before {d}'s standup."),
        ("fact", "The {s} is owned by {p}'s team in {c} and has {n} open tickets."),
        ("goal", "Goal for {m}: finish the {s} with fewer than {n} open bugs."),
        ("event", "Kick-off for the {s} on {d} with {p} ran {n} minutes over."),
        ("preference", "{p} prefers async updates on the {s}, weekly on {d}."),
    ],
}
QUERY_TEMPLATES: dict[str, list[str]] = {
    "hobby": [
        "what are my plans for {s}",
        "when did I last go {s} with {p}?",
        "any notes about {s}",
        "who is coaching me in {s}",
        "how often do I do {s}",
    ],
    "tool": [
        "what did we decide about {s}?",
        "details of the last {s} outage",
        "how much traffic does {s} handle",
        "plans for upgrading {s}",
        "what does {p} think of {s}",
    ],
    "place": [
        "when am I travelling to {s}?",
        "hotel budget for {s}",
        "who do I know in {s}",
        "is the offsite in {s}",
        "what do I want to do in {s}",
    ],
    "food": [
        "does anyone have a problem with {s}?",
        "where to get good {s}",
        "how often should I have {s}",
        "team lunch order with {s}",
        "what did {p} say about {s}",
    ],
    "project": [
        "status of the {s}",
        "who owns the {s}?",
        "deadline for the {s}",
        "next steps on the {s} with {p}",
        "what did we decide for the {s}",
    ],
}
ASSISTANT_LINES = [
    "Sure, I'll keep that in mind.",
    "Got it. Anything else you want me to note?",
    "Noted, I'll remind you when it comes up.",
    "Understood.",
]
TOPICS: list[tuple[str, str]] = [
    (cat, subject) for cat, names in SUBJECTS.items() for subject in names
]


class TextGen:
    """Deterministic sentences about a topic (an index into TOPICS)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def _fill(self, template: str, topic: int) -> str:
        rng = self.rng
        subject = TOPICS[topic][1]
        return template.format(
            s=subject,
            p=rng.choice(PEOPLE),
            c=rng.choice(CITIES),
            t=rng.choice(SUBJECTS["tool"]),
            n=rng.choice((rng.randint(2, 60), rng.randint(10, 5000))),
            d=rng.choice(WEEKDAYS),
            m=rng.choice(MONTHS),
        )

    def memory(self, topic: int) -> tuple[str, str]:
        kind, template = self.rng.choice(MEMORY_TEMPLATES[TOPICS[topic][0]])
        return kind, self._fill(template, topic)

    def query(self, topic: int) -> str:
        return self._fill(self.rng.choice(QUERY_TEMPLATES[TOPICS[topic][0]]), topic)


# -- synthetic vectors -----------------------------------------------------------------------


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


class Space:
    """Topic centroids and noisy samples around them (SYNTHETIC embeddings)."""

    def __init__(self, dim: int, topics: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        common = _unit(rng.standard_normal(dim))
        own = _unit(rng.standard_normal((topics, dim)))
        self.dim = dim
        self.centroids = _unit(SHARED_DIRECTION * common + own)

    def sample(self, topics: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One unit vector per topic index; the noise norm varies ±25 % between samples."""
        scale = NOISE_NORM / math.sqrt(self.dim) * rng.uniform(0.8, 1.25, size=(len(topics), 1))
        noise = rng.standard_normal((len(topics), self.dim)) * scale
        return _unit(self.centroids[topics] + noise).astype(np.float32)


class BenchEmbedder:
    """The Embedder protocol over precomputed synthetic vectors: a registered text gets its
    vector back; an unknown one gets a text-seeded random vector (and is counted)."""

    name = "bench-synthetic"

    def __init__(self, space: Space, seed: int) -> None:
        self.space = space
        self.dim = space.dim
        self.rng = np.random.default_rng(seed)
        self.vectors: dict[str, list[float]] = {}
        self.unknown = 0

    def register(self, text_: str, topic: int) -> list[float]:
        """The text's vector (made on first sight, so a repeated text keeps one vector)."""
        if text_ not in self.vectors:
            vector = self.space.sample(np.array([topic]), self.rng)[0].tolist()
            self.vectors[text_] = vector
            # Procedural suggestions embed the normalised query pattern: same meaning.
            self.vectors.setdefault(normalise_pattern(text_), vector)
        return self.vectors[text_]

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        out = []
        for item in texts:
            vector = self.vectors.get(item)
            if vector is None:
                self.unknown += 1
                seed = int.from_bytes(hashlib.sha256(item.encode()).digest()[:8], "big")
                raw = np.random.default_rng(seed).standard_normal(self.dim)
                vector = _unit(raw).tolist()
            out.append(vector)
        return out


# -- data ------------------------------------------------------------------------------------


def user_name(index: int) -> str:
    return f"user-{index:04d}"


def user_sizes(total: int, users: int, skew: float) -> np.ndarray:
    """Memories per user, largest first: Zipf weights, at least 3 each (1 if too few)."""
    minimum = min(3, total // users)
    weights = 1.0 / np.arange(1, users + 1) ** skew
    sizes = np.maximum(minimum, np.floor(total * weights / weights.sum())).astype(np.int64)
    sizes[0] += total - int(sizes.sum())
    if sizes[0] < sizes[1] or sizes.min() < 1:
        raise SystemExit(f"cannot split {total} memories over {users} users with skew {skew}")
    return sizes


def user_topics(sizes: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Each user's memories' topics: mostly a few favourites (more for bigger users)."""
    out = []
    for size in sizes:
        favourites = int(min(len(TOPICS), max(3, 3 * math.sqrt(size))))
        chosen = rng.choice(len(TOPICS), size=favourites, replace=False)
        weights = 1.0 / np.arange(1, favourites + 1) ** 0.8
        out.append(rng.choice(chosen, size=int(size), p=weights / weights.sum()).astype(np.int32))
    return out


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


# -- queries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    user: int
    topic: int
    text: str
    picked: str  # "uniform" | "by size"


class Workload:
    def __init__(
        self,
        sizes: np.ndarray,
        topics_by_user: list[np.ndarray],
        embedder: BenchEmbedder,
        seed: int,
    ) -> None:
        self.sizes = sizes
        self.topics_by_user = topics_by_user
        self.embedder = embedder
        self.rng = np.random.default_rng(seed)
        self.gen = TextGen(seed)

    def users(self, count: int, picked: str) -> list[int]:
        if picked == "uniform":
            return [int(u) for u in self.rng.integers(0, len(self.sizes), size=count)]
        p = self.sizes / self.sizes.sum()
        return [int(u) for u in self.rng.choice(len(self.sizes), size=count, p=p)]

    def query(self, user: int, picked: str, topic: int | None = None) -> Query:
        if topic is None:  # the topic of one of the user's memories
            topics = self.topics_by_user[user]
            topic = int(topics[self.rng.integers(0, len(topics))])
        text_ = self.gen.query(topic)
        self.embedder.register(text_, topic)
        return Query(user=user, topic=topic, text=text_, picked=picked)

    def mixed(self, count: int) -> list[Query]:
        """First half for uniformly drawn users, second half drawn by size."""
        half = count // 2
        uniform = [self.query(u, "uniform") for u in self.users(half, "uniform")]
        by_size = [self.query(u, "by size") for u in self.users(count - half, "by size")]
        return uniform + by_size

    def conversation(self, user: int) -> tuple[list[WorkingTurn], int]:
        """A few live turns on one of the user's topics (registered as prefetch will embed
        them: its query is the last user turns joined), and that topic."""
        topics = self.topics_by_user[user]
        topic = int(topics[self.rng.integers(0, len(topics))])
        now = datetime.now(UTC)
        lines = []
        for i in range(3):
            said = self.gen.query(topic) if i % 2 else self.gen.memory(topic)[1]
            lines.append(("user", "User", said))
            lines.append(("assistant", "Assistant", self.gen.rng.choice(ASSISTANT_LINES)))
        turns = [
            WorkingTurn(
                id=str(uuid.uuid4()),
                role=role,
                speaker=speaker,
                channel="web",
                content=content,
                tokens=count_tokens(content),
                at=now - timedelta(minutes=len(lines) - i),
            )
            for i, (role, speaker, content) in enumerate(lines)
        ]
        said = " ".join(t.content for t in turns if t.role == "user")[:4000]
        self.embedder.register(said, topic)
        return turns, topic


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def size_bucket(size: int) -> str:
    if size > BIG_USER:
        return f">{BIG_USER}"
    return "101-2000" if size > 100 else "<=100"


BUCKETS = ("<=100", "101-2000", f">{BIG_USER}")


def run_searches(
    queries: list[Query], settings: Settings, embedder: BenchEmbedder
) -> tuple[list[float], int, int]:
    """Latency (ms) per query; how many returned nothing; how many had a top hit on topic."""
    latencies = []
    empty = on_topic = 0
    for q in queries:
        request = SearchRequest(user_id=user_name(q.user), query=q.text, limit=10)
        started = time.perf_counter()
        result = search(
            TENANT, request, settings=settings, embedder=embedder, client=None, record=False
        )
        latencies.append((time.perf_counter() - started) * 1000)
        if not result.hits:
            empty += 1
        elif TOPICS[q.topic][1].lower() in result.hits[0].content.lower():
            on_topic += 1
    return latencies, empty, on_topic


def push_conversations(
    store: WorkingMemoryStore, workload: Workload, users: set[int], done: set[int]
) -> None:
    batch = {}
    for user in sorted(users - done):
        batch[(TENANT, user_name(user))] = workload.conversation(user)[0]
        done.add(user)
    for start in range(0, len(batch), 200):
        keys = list(batch)[start : start + 200]
        store.push({key: batch[key] for key in keys})


class StatementTrap:
    """Catches the dense query's SQL and parameters as the driver receives them (the
    search path's reads go to psycopg directly: app/db/rows.py)."""

    def __init__(self) -> None:
        self.caught: tuple[str, Any] | None = None
        self._execute = psycopg.Cursor.execute

    def __enter__(self) -> StatementTrap:
        execute = self._execute

        def trapping(cursor: Any, statement: Any, parameters: Any = None, **kw: Any) -> Any:
            text_of = str(statement)
            if self.caught is None and "<=>" in text_of and not text_of.startswith("EXPLAIN"):
                self.caught = (text_of, parameters)
            return execute(cursor, statement, parameters, **kw)

        psycopg.Cursor.execute = trapping  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        psycopg.Cursor.execute = self._execute  # type: ignore[method-assign]


INDEX_IN_PLAN = re.compile(
    r"((?:Parallel )?(?:Index Only Scan|Index Scan|Bitmap Index Scan))"
    r" (?:Backward )?(?:using|on) (\S+)"
)


def explain_dense(settings: Settings, user: int, vector: list[float]) -> tuple[list[str], str]:
    """(index scans in the plan, execution time) of the search's dense query for a user."""
    with unit_of_work(TENANT) as session:
        with StatementTrap() as trap:
            dense_candidates(
                session,
                MemoryFilter(tenant_id=TENANT, user_id=user_name(user)),
                vector,
                limit=max(settings.search_candidates, 10),
                ef_search=max(settings.search_ef_search, settings.search_candidates),
            )
        assert trap.caught is not None
        statement, parameters = trap.caught
        plan = [
            row[0]
            for row in session.connection().exec_driver_sql(
                "EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters
            )
        ]
    scans = [f"{name} ({node})" for node, name in INDEX_IN_PLAN.findall("\n".join(plan))]
    if any("Seq Scan" in line for line in plan):
        scans.append("Seq Scan")
    took = next((line.split(":", 1)[1].strip() for line in plan if "Execution Time" in line), "?")
    return scans, took


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=None, help="default 100,000")
    parser.add_argument("--large", action="store_true", help="1,000,000 memories")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of user sizes")
    parser.add_argument("--queries", type=int, default=2000, help="search() calls (timed)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--context-queries", type=int, default=500)
    parser.add_argument("--prefetch-users", type=int, default=200)
    parser.add_argument("--recall-queries", type=int, default=300)
    parser.add_argument("--embed-queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--maintenance-work-mem",
        default="1GB",
        help="for the index builds; the HNSW build slows down sharply once its graph no longer "
        "fits (roughly 2-3 GB at 1,000,000 memories)",
    )
    args = parser.parse_args()
    total = args.memories or (1_000_000 if args.large else 100_000)
    if total < args.users:
        raise SystemExit("need at least one memory per user")

    settings = get_settings()
    if settings.database_url:
        raise SystemExit(
            "this benchmark drops and rebuilds semantic.memories' indexes: run it on the "
            "embedded server (unset DATABASE_URL)"
        )
    services = fresh_database(settings)
    client = get_redis(settings)
    try:
        return _run(args, total, settings, client)
    finally:
        leftover = list(client.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
        for start in range(0, len(leftover), 1000):
            client.delete(*leftover[start : start + 1000])
        services.stop()


def _run(args: argparse.Namespace, total: int, settings: Settings, client: Any) -> int:
    rng = np.random.default_rng(args.seed)
    sizes = user_sizes(total, args.users, args.skew)
    topics_by_user = user_topics(sizes, rng)
    space = Space(settings.embedding_dim, len(TOPICS), args.seed)
    big_users = int((sizes > BIG_USER).sum())
    print(
        f"memories={total:,} users={args.users} topics={len(TOPICS)} (SYNTHETIC embeddings, "
        f"{settings.embedding_dim}-d); user sizes: largest {sizes[0]:,}, "
        f"top 5 {', '.join(f'{s:,}' for s in sizes[:5])}, median {int(np.median(sizes))}, "
        f"smallest {sizes[-1]}; {big_users} users > {BIG_USER:,}",
        flush=True,
    )
    loaded = load(settings, sizes, topics_by_user, space, args.seed, args.maintenance_work_mem)
    print(
        f"loaded in {loaded.load_s:.1f}s ({total / loaded.load_s:,.0f} rows/s); indexes "
        f"{loaded.index_build_s:.1f}s ("
        + ", ".join(f"{name} {s:.1f}s" for name, s in loaded.index_times.items())
        + f"); kept during load: {', '.join(loaded.kept_indexes)}; VACUUM ANALYZE "
        f"{loaded.vacuum_s:.1f}s; hot view refresh {loaded.hot_refresh_s:.1f}s",
        flush=True,
    )
    for notice in loaded.index_notices:
        print(f"  index build notice: {notice}")
    print(
        f"synthetic cosine (measured): same topic {loaded.same_topic_cos:.3f}, cross topic "
        f"{loaded.cross_topic_cos:.3f}, query vs same-topic memory {loaded.query_topic_cos:.3f}",
        flush=True,
    )
    with owner_engine(settings).connect() as conn:
        vector_version = conn.execute(
            text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        ).scalar_one()
        table_mb = conn.execute(
            text("SELECT pg_total_relation_size('semantic.memories') / 1048576.0")
        ).scalar_one()
    print(f"pgvector {vector_version}; semantic.memories with indexes {float(table_mb):,.0f} MB")

    embedder = BenchEmbedder(space, args.seed + 10)
    workload = Workload(sizes, topics_by_user, embedder, args.seed + 20)

    # 1. search()
    run_searches(workload.mixed(args.warmup), settings, embedder)
    queries = workload.mixed(args.queries)
    latencies, empty, on_topic = run_searches(queries, settings, embedder)
    half = args.queries // 2
    uniform_ms, by_size_ms = latencies[:half], latencies[half:]
    by_bucket: dict[str, list[float]] = {b: [] for b in BUCKETS}
    for q, ms in zip(queries, latencies, strict=True):
        by_bucket[size_bucket(int(sizes[q.user]))].append(ms)
    print(
        f"search ({args.queries} queries, limit 10, ef_search {settings.search_ef_search}, "
        f"{settings.search_candidates} candidates/ranking, fusion {settings.search_fusion}): "
        f"p50 {percentile(latencies, 0.5):.1f} ms, p95 {percentile(latencies, 0.95):.1f}, "
        f"p99 {percentile(latencies, 0.99):.1f}; users uniform p50 "
        f"{percentile(uniform_ms, 0.5):.1f} / p95 {percentile(uniform_ms, 0.95):.1f}, by size "
        f"p50 {percentile(by_size_ms, 0.5):.1f} / p95 {percentile(by_size_ms, 0.95):.1f}",
        flush=True,
    )
    for bucket, values in by_bucket.items():
        if values:
            print(
                f"  user size {bucket:>8}: {len(values):5d} queries, p50 "
                f"{percentile(values, 0.5):.1f} ms, p95 {percentile(values, 0.95):.1f} ms"
            )
    print(f"  empty results {empty}; top hit on the query's topic {on_topic / len(queries):.0%}")

    # 2. assemble_context() without prefetch
    store = WorkingMemoryStore(client, settings)
    conversing: set[int] = set()
    context_queries = workload.mixed(args.context_queries)
    push_conversations(store, workload, {q.user for q in context_queries}, conversing)
    context_ms = []
    context_misses = 0
    context_tokens = []
    for q in context_queries:
        request = ContextRequest(user_id=user_name(q.user), query=q.text)
        started = time.perf_counter()
        result = assemble_context(
            TENANT, request, settings=settings, embedder=embedder, client=client
        )
        context_ms.append((time.perf_counter() - started) * 1000)
        context_misses += result.prefetch == "miss"
        context_tokens.append(result.tokens)
    print(
        f"assemble_context ({len(context_queries)} queries, live turns, no prefetch): p50 "
        f"{percentile(context_ms, 0.5):.1f} ms, p95 {percentile(context_ms, 0.95):.1f}, p99 "
        f"{percentile(context_ms, 0.99):.1f}; mean {np.mean(context_tokens):.0f} tokens; "
        f"{context_misses}/{len(context_queries)} took the search path",
        flush=True,
    )

    # 3. prefetch, then assemble_context from it
    half_users = args.prefetch_users // 2
    prefetch_users = workload.users(half_users, "uniform") + workload.users(
        args.prefetch_users - half_users, "by size"
    )
    push_conversations(store, workload, set(prefetch_users), conversing)
    prefetch_ms, hit_ms, prefetched = [], [], []
    misses: list[str] = []
    for index, user in enumerate(prefetch_users):
        q = workload.query(user, "uniform" if index < half_users else "by size")
        started = time.perf_counter()
        count = prefetch(
            TENANT, user_name(user), None, settings=settings, embedder=embedder, client=client
        )
        prefetch_ms.append((time.perf_counter() - started) * 1000)
        prefetched.append(count)
        request = ContextRequest(user_id=user_name(user), query=q.text)
        started = time.perf_counter()
        result = assemble_context(
            TENANT, request, settings=settings, embedder=embedder, client=client
        )
        hit_ms.append((time.perf_counter() - started) * 1000)
        if result.prefetch != "hit":
            entry = cached(client, settings, TENANT, user_name(user), None)
            misses.append(
                f"{user_name(user)} ({int(sizes[user])} memories, prefetched {count}, "
                f"entry {'present' if entry else 'absent'})"
            )
    print(
        f"prefetch ({len(prefetch_users)} users): prefetch() p50 "
        f"{percentile(prefetch_ms, 0.5):.1f} ms, p95 {percentile(prefetch_ms, 0.95):.1f}, "
        f"{np.mean(prefetched):.0f} memories cached on average; assemble_context on the hit "
        f"p50 {percentile(hit_ms, 0.5):.1f} ms, p95 {percentile(hit_ms, 0.95):.1f}",
        flush=True,
    )
    if misses:
        print(f"  NOT A HIT for {len(misses)} users: {'; '.join(misses[:10])}")
    else:
        print(f"  all {len(prefetch_users)} context calls after prefetch were hits")

    # 4. ANN recall: index vs exact, at 10 and at the search's own candidate count
    recall_queries = workload.mixed(args.recall_queries)
    ef10 = settings.search_ef_search
    wide = settings.search_candidates
    ef_wide = max(settings.search_ef_search, wide)
    recall10: list[tuple[int, float]] = []
    recall_wide: list[float] = []
    ann_ms, exact_ms = [], []
    for q in recall_queries:
        memory_filter = MemoryFilter(tenant_id=TENANT, user_id=user_name(q.user))
        vector = embedder.vectors[q.text]
        found = {}
        for name, limit, ef, exact in (
            ("ann10", 10, ef10, False),
            ("exact10", 10, ef10, True),
            ("ann", wide, ef_wide, False),
            ("exact", wide, ef_wide, True),
        ):
            started = time.perf_counter()
            with unit_of_work(TENANT) as session:
                found[name] = set(
                    dense_candidates(
                        session, memory_filter, vector, limit=limit, ef_search=ef, exact=exact
                    )
                )
            took = (time.perf_counter() - started) * 1000
            if name == "ann":
                ann_ms.append(took)
            elif name == "exact":
                exact_ms.append(took)
        if found["exact10"]:
            hit = len(found["ann10"] & found["exact10"]) / len(found["exact10"])
            recall10.append((int(sizes[q.user]), hit))
        if found["exact"]:
            recall_wide.append(len(found["ann"] & found["exact"]) / len(found["exact"]))
    recall = float(np.mean([r for _, r in recall10]))
    big_recall = [r for size, r in recall10 if size > BIG_USER]
    recall_big = float(np.mean(big_recall)) if big_recall else float("nan")
    recall_at_wide = float(np.mean(recall_wide))
    print(
        f"ANN recall ({len(recall10)} queries, ef_search {ef10}): recall@10 {recall:.4f}; "
        f"users > {BIG_USER:,}: "
        + (f"{recall_big:.4f} over {len(big_recall)} queries" if big_recall else "none queried")
        + f"; recall@{wide} (ef_search {ef_wide}, what search() asks) {recall_at_wide:.4f}; "
        f"dense query at {wide}: index p50 {percentile(ann_ms, 0.5):.1f} ms / p95 "
        f"{percentile(ann_ms, 0.95):.1f}, exact p50 {percentile(exact_ms, 0.5):.1f} ms / p95 "
        f"{percentile(exact_ms, 0.95):.1f}",
        flush=True,
    )
    for bucket in BUCKETS:
        values = [r for size, r in recall10 if size_bucket(size) == bucket]
        if values:
            print(
                f"  user size {bucket:>8}: recall@10 {np.mean(values):.4f} ({len(values)} queries)"
            )
    order = np.argsort(-sizes, kind="stable")
    mid = int(order[np.argmin(np.abs(sizes[order] - 500))])
    median = int(order[len(order) // 2])
    for label, user in (("largest", int(order[0])), ("mid-sized", mid), ("median", median)):
        topic = int(topics_by_user[user][0])
        probe = workload.query(user, "uniform", topic).text
        scans, took = explain_dense(settings, user, embedder.vectors[probe])
        print(
            f"  EXPLAIN dense query, {label} user ({int(sizes[user]):,} memories): "
            f"{', '.join(scans) or 'no index'}; execution {took}"
        )

    # 5. the real model's cost for one query
    model = local_embedder(settings.embedding_threads)
    texts: list[str] = []
    seen: set[str] = set()
    while len(texts) < args.embed_queries + 5:
        candidate = workload.gen.query(int(workload.rng.integers(0, len(TOPICS))))
        if candidate not in seen:
            seen.add(candidate)
            texts.append(candidate)
    for warm in texts[:5]:
        model.embed([warm])
    embed_ms = []
    for query in texts[5:]:
        started = time.perf_counter()
        model.embed([query])
        embed_ms.append((time.perf_counter() - started) * 1000)
    print(
        f"real query embedding ({model.name}, {settings.embedding_threads} thread(s), "
        f"{len(embed_ms)} distinct queries): p50 {percentile(embed_ms, 0.5):.1f} ms, p95 "
        f"{percentile(embed_ms, 0.95):.1f} ms (add this to the search figures for a real "
        f"query; synthetic vectors served {embedder.unknown} unregistered texts)"
    )

    p50, p95, p99 = (percentile(latencies, q) for q in (0.5, 0.95, 0.99))
    context_p95 = percentile(context_ms, 0.95)
    print(
        f"summary: over {total:,} memories of {args.users} users (largest {sizes[0]:,}, median "
        f"{int(np.median(sizes))}), one search() takes {p50:.1f} ms at p50 and {p95:.1f} ms at "
        f"p95 without the model ({p50 + percentile(embed_ms, 0.5):.1f} ms p50 with a real "
        f"local embedding); a context block {context_p95:.1f} ms at p95, "
        f"{percentile(hit_ms, 0.95):.1f} ms when prefetched; the dense query (index "
        f"plans) returns {recall:.1%} of the exact top 10. Embeddings are synthetic."
    )
    print(
        f"search p50_ms={p50:.2f} p95_ms={p95:.2f} p99_ms={p99:.2f} "
        f"context_p95_ms={context_p95:.2f} ann_recall_at_10={recall:.4f} "
        f"ann_recall_at_10_big={recall_big:.4f} ann_recall_at_{wide}={recall_at_wide:.4f} "
        f"uniform_p95_ms={percentile(uniform_ms, 0.95):.2f} "
        f"by_size_p95_ms={percentile(by_size_ms, 0.95):.2f} "
        f"context_p50_ms={percentile(context_ms, 0.5):.2f} "
        f"prefetch_hit_p50_ms={percentile(hit_ms, 0.5):.2f} "
        f"prefetch_hit_p95_ms={percentile(hit_ms, 0.95):.2f} "
        f"prefetch_p95_ms={percentile(prefetch_ms, 0.95):.2f} "
        f"prefetch_hits={len(prefetch_users) - len(misses)}/{len(prefetch_users)} "
        f"embed_p50_ms={percentile(embed_ms, 0.5):.2f} "
        f"embed_p95_ms={percentile(embed_ms, 0.95):.2f} "
        f"memories={total} users={args.users} largest_user={sizes[0]} "
        f"median_user={int(np.median(sizes))} load_s={loaded.load_s:.1f} "
        f"index_build_s={loaded.index_build_s:.1f} synthetic_embeddings=1"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
