"""bench/scale.py's search phase: search() latency and cost at several table sizes.

One database per size (`engram_bench_scale_search_<size>`), loaded by the search
benchmark's loader (bench/_search_load.py: COPY with the secondary indexes dropped, then the
model's own index definitions rebuilt, HNSW included, with the given maintenance_work_mem)
and labelled with a comment naming what it holds, so `--reuse` keeps a database whose label
matches instead of building 1,000,000 memories again.

Vectors: a pool of real embeddings (the shipped model, over `--pool-per-topic` template
sentences for each of bench/_search_corpus.py's 200 topics, computed once per run) recombined into
one distinct unit vector per memory (bench/_capacity.py's VectorPool). Queries are
the search benchmark's paraphrases, embedded by the real model before timing, so the latencies are
retrieval alone; the model's cost per query is measured beside them. Each database is read
into the page cache before its searches (PgProbe.prewarm): latencies of the search path at that
size, not of this machine's disk.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from _capacity import VectorPool, percentile
from _measure import Meter, PgProbe, hnsw_bytes, relation_bytes, use_database
from _search_corpus import TOPICS, TextGen, user_sizes, user_topics
from _search_load import load as load_corpus
from _search_workload import Workload, run_searches
from sqlalchemy import text

from app.cli.supervisor import fresh_database
from app.db.migrate import upgrade
from app.db.session import owner_engine
from app.embedding.base import Embedder, Owner
from app.embedding.factory import local_embedder
from app.scoring.procedural import normalise_pattern

# Part of the label --reuse matches: raised when the schema a database was loaded into changes
# its layout (2: semantic.memories partitioned by user), so such a database is built anew.
LABEL_VERSION = 2


def size_label(size: int) -> str:
    for unit, name in ((1_000_000, "m"), (1_000, "k")):
        if size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


class QueryEmbedder:
    """The Embedder protocol over query vectors the real model computed before timing
    (`register`, called by bench/_search_workload.py's Workload); the model's CPU per query
    is kept."""

    def __init__(self, model: Embedder) -> None:
        self.model = model
        self.name = model.name
        self.dim = model.dim
        self.vectors: dict[str, list[float]] = {}
        self.cpu_s = 0.0
        self.wall_ms: list[float] = []
        self.unknown = 0

    def register(self, text_: str, topic: int) -> list[float]:
        if text_ not in self.vectors:
            cpu, wall = time.process_time(), time.perf_counter()
            vector = self.model.embed([text_])[0]
            self.cpu_s += time.process_time() - cpu
            self.wall_ms.append((time.perf_counter() - wall) * 1000)
            self.vectors[text_] = vector
            self.vectors.setdefault(normalise_pattern(text_), vector)
        return self.vectors[text_]

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        missing = [t for t in texts if t not in self.vectors]
        self.unknown += len(missing)
        found = dict(zip(missing, self.model.embed(missing), strict=True)) if missing else {}
        return [self.vectors.get(t) or found[t] for t in texts]


def build_pool(model: Embedder, per_topic: int, seed: int, noise: float) -> VectorPool:
    """`per_topic` distinct template sentences per topic, embedded by the real model."""
    gen = TextGen(seed)
    texts: list[str] = []
    for topic in range(len(TOPICS)):
        mine: set[str] = set()
        while len(mine) < per_topic:
            mine.add(gen.memory(topic)[1])
        texts.extend(sorted(mine))
    started = time.perf_counter()
    vectors = np.asarray(model.embed(texts), dtype=np.float64)
    took = time.perf_counter() - started
    print(
        f"vector pool: {len(texts):,} real sentence embeddings ({per_topic} per topic) in "
        f"{took:.1f}s, recombined with noise {noise}",
        flush=True,
    )
    return VectorPool(vectors.reshape(len(TOPICS), per_topic, -1), noise=noise)


@dataclass
class SearchRun:
    memories: int
    users: int
    largest: int
    median: int
    reused: bool
    load_s: float
    index_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    uniform_p95_ms: float
    by_size_p95_ms: float
    api_cpu_s: float  # per search, retrieval in this process
    pg_cpu_s: float  # per search, its backends
    embed_cpu_s: float  # per query, the model
    embed_p50_ms: float
    bytes_per_memory: float
    hnsw_bytes_per_memory: float
    empty: int


def run_size(
    size: int, args: argparse.Namespace, probe: PgProbe, pool: list[VectorPool]
) -> SearchRun:
    """Load (or reuse) `size` memories and time search() over them. `pool` holds the vector
    pool once built, so a run builds it at most once."""
    users = args.search_users or max(1, size // args.memories_per_user)
    database = f"engram_bench_scale_search_{size_label(size)}"
    settings = use_database(database, f"bench-scale-{os.getpid()}-search")
    sizes = user_sizes(size, users, args.skew)
    topics_by_user = user_topics(sizes, np.random.default_rng(args.seed))
    label = (
        f"bench/scale.py v{LABEL_VERSION} memories={size} users={users} skew={args.skew} "
        f"seed={args.seed} pool={args.pool_per_topic} noise={args.noise}"
    )
    print(
        f"search at {size:,} memories: {users:,} users (memories / {args.memories_per_user}"
        f"{', --search-users' if args.search_users else ''}), Zipf exponent {args.skew}: "
        f"largest {sizes[0]:,}, median {int(np.median(sizes))}, smallest {sizes[-1]}",
        flush=True,
    )
    model = local_embedder(settings.embedding_threads, settings.embedding_local_model)
    reused = bool(args.reuse and probe.comment(database) == label)
    load_s = index_s = float("nan")
    if reused:
        upgrade()
        print(f"  reusing {database} ({label})", flush=True)
    else:
        fresh_database(settings)
        if not pool:
            pool.append(build_pool(model, args.pool_per_topic, args.seed, args.noise))
        loaded = load_corpus(
            settings, sizes, topics_by_user, pool[0], args.seed, args.maintenance_work_mem
        )
        probe.set_comment(database, label)
        load_s, index_s = loaded.load_s, loaded.index_build_s
        print(
            f"  loaded in {load_s:.1f}s, indexes {index_s:.1f}s "
            f"({', '.join(f'{n} {s:.1f}s' for n, s in loaded.index_times.items())}); "
            f"cosine same topic {loaded.same_topic_cos:.3f}, cross topic "
            f"{loaded.cross_topic_cos:.3f}",
            flush=True,
        )
        for notice in loaded.index_notices:
            print(f"  index build notice: {notice}")

    # This machine's kernel pages out file pages left unread for about a minute (DAMON's
    # pageout scheme), so a database the previous size's phase left idle was read back from
    # disk by its first searches, which measured the disk, not the search path. A server
    # keeps its hot pages.
    started = time.perf_counter()
    blocks = probe.prewarm(database, ("semantic", "episodic"))
    read_s = time.perf_counter() - started
    print(
        f"  read {blocks * 8 / 1024**2:.1f} GiB of its tables and indexes into the page cache "
        f"first (pg_prewarm 'read', {read_s:.1f}s)",
        flush=True,
    )
    embedder = QueryEmbedder(model)
    workload = Workload(sizes, topics_by_user, embedder, args.seed + 20)
    run_searches(workload.mixed(args.warmup), settings, embedder)
    queries = workload.mixed(args.queries)
    embed_cpu = embedder.cpu_s / max(1, len(embedder.wall_ms))
    meter = Meter(
        probe,
        {
            "api": lambda: {os.getpid()},
            "postgres": lambda: probe.backends(database, settings.app_role),
        },
    )
    meter.start()
    latencies, empty, _ = run_searches(queries, settings, embedder)
    reading = meter.stop()
    half = len(queries) // 2
    with owner_engine(settings).connect() as conn:
        table = relation_bytes(conn, "semantic.memories")
        hnsw = hnsw_bytes(conn, "semantic.memories")
        buffers = conn.execute(text("SHOW shared_buffers")).scalar_one()
    run = SearchRun(
        memories=size,
        users=users,
        largest=int(sizes[0]),
        median=int(np.median(sizes)),
        reused=reused,
        load_s=load_s,
        index_s=index_s,
        p50_ms=percentile(latencies, 0.5),
        p95_ms=percentile(latencies, 0.95),
        p99_ms=percentile(latencies, 0.99),
        uniform_p95_ms=percentile(latencies[:half], 0.95),
        by_size_p95_ms=percentile(latencies[half:], 0.95),
        api_cpu_s=reading.cpu("api") / len(queries),
        pg_cpu_s=reading.cpu("postgres") / len(queries),
        embed_cpu_s=embed_cpu,
        embed_p50_ms=percentile(embedder.wall_ms, 0.5),
        bytes_per_memory=table / size,
        hnsw_bytes_per_memory=hnsw / size,
        empty=empty,
    )
    print(
        f"  {len(queries)} searches (half for users drawn uniformly, half by size; "
        f"unit {settings.search_unit}, limit 10; shared_buffers {buffers}): p50 "
        f"{run.p50_ms:.1f} ms, p95 {run.p95_ms:.1f}, p99 {run.p99_ms:.1f}; uniform p95 "
        f"{run.uniform_p95_ms:.1f}, by size p95 {run.by_size_p95_ms:.1f}; CPU per search "
        f"{run.api_cpu_s * 1000:.1f} ms here + {run.pg_cpu_s * 1000:.1f} ms Postgres, "
        f"+ {run.embed_cpu_s * 1000:.1f} ms for the query's embedding (p50 "
        f"{run.embed_p50_ms:.1f} ms); memories {run.bytes_per_memory:,.0f} B each with "
        f"indexes (HNSW {run.hnsw_bytes_per_memory:,.0f}); {empty} empty results",
        flush=True,
    )
    return run
