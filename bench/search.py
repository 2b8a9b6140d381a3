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
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench_search")
os.environ["ENGRAM_REDIS_PREFIX"] = f"benchs-{os.getpid()}"

import numpy as np
from _search_corpus import (
    BIG_USER,
    TENANT,
    TOPICS,
    BenchEmbedder,
    Space,
    user_name,
    user_sizes,
    user_topics,
)
from _search_load import load
from _search_workload import (
    BUCKETS,
    Workload,
    explain_dense,
    percentile,
    push_conversations,
    run_searches,
    size_bucket,
)
from sqlalchemy import text

from app.cli.supervisor import fresh_database
from app.config import Settings, get_settings
from app.db.session import owner_engine, unit_of_work
from app.embedding.factory import local_embedder
from app.layers.semantic.search import MemoryFilter, dense_candidates
from app.layers.working.store import WorkingMemoryStore
from app.redis_client import get_redis
from app.services.context import ContextRequest, assemble_context
from app.services.prefetch import cached, prefetch


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
    model = local_embedder(settings.embedding_threads, settings.embedding_local_model)
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
