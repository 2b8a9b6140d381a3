"""Ingest benchmark: producer rate, end-to-end persisted rate and lag through real workers.

Phase 1 measures the producer alone (validation + pipelined capped XADD, no consumers).
Phase 2 starts N real `celery worker` processes (one stream consumer each), pushes the turns
again under a fresh prefix while they consume, and waits until every turn is committed in L2
and L1 and acked. Lag is XADD → ack (after commit and the L1 update), as recorded by the
consumers. Runs on its own database (`engram_bench`) and Redis prefix; cleans up after itself.

Last line: `ingest turns_per_s=<N> producer_per_s=<N> lag_p99_ms=<N> ...`
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench")

from sqlalchemy import func, select

from app.cli.supervisor import fresh_database, worker_command
from app.config import PROJECT_ROOT, get_settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.episodic.models import Turn
from app.redis_client import get_redis
from app.streams.producer import EventProducer

CHUNK = 1000


def make_turns(tenant: str, turns: int, users: int) -> list[dict[str, object]]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {
            "type": "turn",
            "tenant_id": tenant,
            "user_id": f"user-{n % users}",
            "role": "user" if n % 2 == 0 else "assistant",
            "content": f"Turn {n}: we agreed to move the standup to 9:30 and to review the "
            f"deployment checklist for service {n % 97} before Friday.",
            "external_id": f"bench-{n}",
            "channel": ("web", "slack", "voice")[n % 3],
            "timestamp": (base + timedelta(seconds=n)).isoformat(),
        }
        for n in range(turns)
    ]


def produce(producer: EventProducer, events: list[dict[str, object]]) -> float:
    started = time.perf_counter()
    for start in range(0, len(events), CHUNK):
        producer.send_many(events[start : start + CHUNK])
    return time.perf_counter() - started


def produce_paced(producer: EventProducer, events: list[dict[str, object]], rate: float) -> None:
    """Send in small batches on a fixed schedule (20 batches a second)."""
    per_batch = max(1, int(rate / 20))
    started = time.perf_counter()
    for index, start in enumerate(range(0, len(events), per_batch)):
        delay = started + index / 20 - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send_many(events[start : start + per_batch])


def clear(client, prefix: str) -> None:  # type: ignore[no-untyped-def]
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])


def consumers_alive(client, keys: RedisKeys) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for _ in client.scan_iter(match=keys.consumer_heartbeats()))


def stored(tenant: str) -> int:
    with unit_of_work(tenant) as session:
        return int(session.scalar(select(func.count()).select_from(Turn)) or 0)


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=50_000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--consumers",
        type=int,
        default=get_settings().consumer_threads,
        help="stream consumers per worker (default ENGRAM_CONSUMER_THREADS)",
    )
    parser.add_argument(
        "--paced-rate", type=float, default=2000.0, help="events/s of the unsaturated lag run"
    )
    parser.add_argument("--paced-turns", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()

    base = get_settings().model_copy(update={"stream_partitions": args.partitions})
    services = fresh_database(base)
    client = get_redis(base)
    run = uuid.uuid4().hex[:8]

    # Phase 1: the producer alone.
    solo = base.model_copy(update={"redis_prefix": f"bench-{run}-producer"})
    events = make_turns(f"bench-{run}", args.turns, args.users)
    producer_s = produce(EventProducer(client, solo), events)
    clear(client, solo.redis_prefix)

    # Phase 2: producer and real workers together, end to end.
    settings = base.model_copy(update={"redis_prefix": f"bench-{run}"})
    keys = RedisKeys.from_settings(settings)
    env = {
        **os.environ,
        "ENGRAM_REDIS_PREFIX": settings.redis_prefix,
        "ENGRAM_DATABASE_NAME": settings.database_name,
        "ENGRAM_STREAM_PARTITIONS": str(args.partitions),
        "ENGRAM_CONSUMER_BATCH_SIZE": str(args.batch),
    }
    workers = [
        subprocess.Popen(
            worker_command(queues=("ingest",), concurrency=1, consumers=args.consumers),
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(args.workers)
    ]
    try:
        deadline = time.monotonic() + 60
        while consumers_alive(client, keys) < args.workers * args.consumers:
            if time.monotonic() > deadline:
                raise SystemExit("workers did not start")
            time.sleep(0.1)
        tenant = f"bench-{run}-e2e"
        events = make_turns(tenant, args.turns, args.users)
        started = time.perf_counter()
        produce(EventProducer(client, settings), events)
        deadline = time.monotonic() + 600
        while stored(tenant) < args.turns:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {stored(tenant)} of {args.turns} turns persisted")
            time.sleep(0.05)
        while client.llen(keys.ingest_lag()) < args.turns:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        lags = [int(v) for v in client.lrange(keys.ingest_lag(), 0, -1)]

        # Phase 3: the same workers under a steady load they can keep up with: the pipeline's
        # own latency, without the queueing a 50k burst adds.
        client.delete(keys.ingest_lag())
        paced_tenant = f"bench-{run}-paced"
        paced = make_turns(paced_tenant, args.paced_turns, args.users)
        produce_paced(EventProducer(client, settings), paced, args.paced_rate)
        deadline = time.monotonic() + 300
        while client.llen(keys.ingest_lag()) < args.paced_turns:
            if time.monotonic() > deadline:
                raise SystemExit("paced run did not finish")
            time.sleep(0.05)
        paced_lags = [int(v) for v in client.lrange(keys.ingest_lag(), 0, -1)]
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
        clear(client, settings.redis_prefix)
        services.stop()

    producer_rate = args.turns / producer_s
    rate = args.turns / elapsed
    print(
        f"turns={args.turns} users={args.users} partitions={args.partitions} "
        f"workers={args.workers} consumers/worker={args.consumers} batch={args.batch}"
    )
    print(f"producer alone: {producer_rate:,.0f} events/s")
    print(
        f"end to end: {rate:,.0f} turns/s persisted in {elapsed:.2f}s; lag p50 "
        f"{percentile(lags, 0.5):.0f} ms, p99 {percentile(lags, 0.99):.0f} ms, "
        f"mean {statistics.fmean(lags):.0f} ms"
    )
    print(
        f"steady {args.paced_rate:,.0f} turns/s: lag p50 {percentile(paced_lags, 0.5):.0f} ms, "
        f"p99 {percentile(paced_lags, 0.99):.0f} ms"
    )
    print(
        f"ingest turns_per_s={rate:.0f} producer_per_s={producer_rate:.0f} "
        f"lag_p99_ms={percentile(lags, 0.99):.0f} lag_p50_ms={percentile(lags, 0.5):.0f} "
        f"steady_lag_p50_ms={percentile(paced_lags, 0.5):.0f} "
        f"steady_lag_p99_ms={percentile(paced_lags, 0.99):.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
