"""bench/scale.py's phase 4: extraction with real workers, then the model alone on what
they embedded."""

from __future__ import annotations

import time
from typing import Any

from _measure import Meter, Window, redis_bytes, relation_bytes, schema_bytes, use_database
from _scale_ingest import TENANT, Bench
from sqlalchemy import text

from app.cli.supervisor import fresh_database
from app.config import get_settings
from app.db.session import owner_engine
from app.embedding.local import LocalEmbedder
from app.keys import RedisKeys
from app.redis_client import get_redis
from app.streams.producer import EventProducer

EXTRACT_DB = "engram_bench_scale_extract"
STALL_S = 180


def wait_extracted(bench: Bench, engine: Any, tenant: str, turns: int) -> None:
    """Until every turn is claimed by an extraction batch and every batch is stored; sends
    beat's idle sweep and retry of stale batches as beat would (bench/extract.py). Gives up
    when nothing moved for STALL_S (a failing task retries forever: see the workers' logs)."""
    from workers.celery_app import app as celery

    last_sweep = last_change = time.monotonic()
    seen: tuple[int, ...] = ()
    while True:
        state = bench.extract_bench.progress(engine, tenant)
        stored, unclaimed, open_batches, _ = state
        if stored == turns and unclaimed == 0 and open_batches == 0:
            return
        if state != seen:
            seen, last_change = state, time.monotonic()
        if stored == turns and time.monotonic() - last_sweep > 3:
            celery.send_task("engram.extract.sweep_idle")
            celery.send_task("engram.extract.retry_stale")
            last_sweep = time.monotonic()
        if time.monotonic() - last_change > STALL_S:
            raise SystemExit(
                f"extraction stalled at {stored} stored, {unclaimed} unclaimed turns, "
                f"{open_batches} open batches: see .engram/bench-scale-extract-*.log"
            )
        time.sleep(0.5)


def extraction(bench: Bench) -> Window:
    args = bench.args
    settings = use_database(
        EXTRACT_DB,
        f"bench-scale-{bench.run}-extract",
        ENGRAM_EXTRACT_IDLE_S="2",
        ENGRAM_EXTRACT_RETRY_AFTER_S="30",
    )
    fresh_database(settings)
    engine = owner_engine(settings)
    with engine.connect() as conn:
        empty = sum(schema_bytes(conn).values())
    client = get_redis(settings)
    keys = RedisKeys.from_settings(settings)
    tenant = f"{TENANT}-x"
    workers = bench.start_workers(
        ("ingest", "extract", "embed"), args.extract_concurrency, 1, "extract", args.workers
    )
    try:
        bench.wait_consumers(client, keys, args.workers)
        producer = EventProducer(client, settings)
        warm = bench.extract_bench.make_turns(f"{tenant}-warm", 300, 30, distinct=True)
        for event in warm:  # the cache is keyed by text: the warm-up must share none
            event["content"] = f"Warm-up: {event['content']}"
        bench.ingest_bench.produce(producer, warm)
        wait_extracted(bench, engine, f"{tenant}-warm", len(warm))
        time.sleep(args.settle)
        events = bench.extract_bench.make_turns(
            tenant, args.extract_turns, args.extract_users, distinct=True
        )
        embedded = int(client.get(keys.embedded_count()) or 0)
        meter = Meter(bench.pg, bench.groups(settings, workers))
        meter.start()
        bench.ingest_bench.produce(producer, events)
        wait_extracted(bench, engine, tenant, len(events))
        window = Window(len(events), meter.stop(args.settle))
        window.extra["embeds_per_turn"] = (
            int(client.get(keys.embedded_count()) or 0) - embedded
        ) / len(events)
        cached = list(client.scan_iter(match=keys.embedding_cache(tenant, "*", "*"), count=1000))
        window.extra["cache_bytes_per_text"] = redis_bytes(client, cached[:2000]) / max(
            1, min(len(cached), 2000)
        )
    finally:
        bench.stop_workers(workers)
        bench.ingest_bench.clear(client, settings.redis_prefix)
    with engine.connect() as conn:
        total_turns, memories = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM episodic.turns),"
                " (SELECT count(*) FROM semantic.memories WHERE tenant_id = :t)"
            ),
            {"t": tenant},
        ).one()
        window.extra["pg_bytes_per_turn"] = (sum(schema_bytes(conn).values()) - empty) / int(
            total_turns
        )
        window.extra["memory_bytes"] = relation_bytes(conn, "semantic.memories") / max(
            1, int(memories)
        )
        window.extra["memories_per_turn"] = int(memories) / len(events)
        window.extra.update(model_rate(bench, conn, tenant, len(events), int(memories)))
    return window


def model_rate(bench: Bench, conn: Any, tenant: str, turns: int, memories: int) -> dict[str, float]:
    """The model alone (one process, the workers' thread count, default batch) on texts of
    the run: turns and memories in their proportion (it embeds sentences of both; reading
    only the tables' content keeps this apart from how the pipeline picks them)."""
    want = bench.args.model_sentences
    from_turns = round(want * turns / max(1, turns + memories))
    texts = list(
        conn.execute(
            text(
                "(SELECT content FROM episodic.turns WHERE tenant_id = :t"
                "  ORDER BY random() LIMIT :a)"
                " UNION ALL (SELECT content FROM semantic.memories WHERE tenant_id = :t"
                "  ORDER BY random() LIMIT :b)"
            ),
            {"t": tenant, "a": from_turns, "b": want - from_turns},
        ).scalars()
    )
    settings = get_settings()
    model = LocalEmbedder(model=settings.embedding_local_model, threads=settings.embedding_threads)
    model.embed(texts[:64])  # load, and warm the batch shapes
    cpu, wall = time.process_time(), time.perf_counter()
    model.embed(texts)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "model_sentences": float(len(texts)),
        "model_per_cpu_s": len(texts) / cpu,
        "model_per_s": len(texts) / wall,
    }
