"""Extraction benchmark: turns → salience → extraction → embedding → L3/L4 with real workers.

Starts N `celery worker` processes serving ingest, extract and embed, pushes a synthetic but
varied conversation (preferences that change, decisions, todos, facts, small talk) for many
users, and waits until every turn is claimed by an extraction batch and every batch is stored
(beat's idle trigger and its retry of failed batches are fired at the end, as beat would).
Peak RSS is sampled per worker process tree. Own database (`engram_bench_extract`) and Redis prefix.

Last line: `extract turns_per_s=<N> gems_per_s=<N> embed_per_s=<N> embeds_per_turn=<N> rss_mb=<N>`
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("ENGRAM_DATABASE_NAME", "engram_bench_extract")
# One prefix for this run, for the workers and for the tasks this process sends.
os.environ["ENGRAM_REDIS_PREFIX"] = f"benchx-{os.getpid()}"

import psutil
from sqlalchemy import text

from app.cli.supervisor import fresh_database, worker_command
from app.config import PROJECT_ROOT, get_settings
from app.db.session import owner_engine
from app.keys import RedisKeys
from app.redis_client import get_redis
from app.streams.producer import EventProducer

PEOPLE = ["Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Greta", "Hiro", "Ines"]
TOOLS = ["Postgres", "Redis", "Kubernetes", "Terraform", "Grafana", "Kafka", "FastAPI", "React"]
CITIES = ["Lisbon", "Porto", "Berlin", "Kyoto", "Austin", "Nairobi", "Lima", "Oslo"]
SEATS = ["aisle", "window"]


def line(n: int, user: int, *, distinct: bool = False) -> tuple[str, str]:
    """(role, content) of turn n: a deterministic mix of what agents hear all day.

    By default details come from small ranges, so users repeat each other's sentences (8,840
    distinct texts among the 18,000 non-small-talk turns of the default run), as people repeat
    routine requests; `distinct` draws every detail from the turn's own counter, so no
    sentence repeats and the embedding cache shares nothing between turns."""
    p, t, c = PEOPLE[(n + user) % 8], TOOLS[(n * 3 + user) % 8], CITIES[(n * 5 + user) % 8]
    k = n * 131 + user * 7  # a per-turn detail

    def small(modulus: int, offset: int) -> int:
        return k + offset if distinct else k % modulus + offset

    kind = n % 10
    if kind == 0:
        seat = SEATS[(n // 10 + user) % 2]
        return "user", f"I prefer {seat} seats when I fly to {c}, ideally row {small(40, 1)}."
    if kind == 1:
        return "assistant", f"Noted, I'll keep that in mind for trip {k}."
    if kind == 2:
        service = small(90, 0)
        return "user", f"We decided to migrate billing service {service} from {t} next quarter."
    if kind == 3:
        return "user", f"Remind me to send {p} the {c} offsite budget of {k} euros by Friday."
    if kind == 4:
        return "user", f"{p} works at the {c} office and runs {small(12, 2)} {t} projects."
    if kind == 5:
        return "user", "ok thanks, sounds good"
    if kind == 6:
        return "user", f"My goal is to cut the {t} bill by {small(40, 10)} percent this year."
    if kind == 7:
        return "assistant", f"The {t} cluster in {c} had {small(17, 2)} incidents last month."
    if kind == 8:
        return "user", f"I'm really worried about the {c} launch deadline for release {k}!"
    return "user", f"Yesterday {p} met the {t} vendor in {c} about contract {k}."


def make_turns(
    tenant: str, turns: int, users: int, *, distinct: bool = False
) -> list[dict[str, object]]:
    base = datetime(2026, 2, 1, tzinfo=UTC)
    events = []
    for n in range(turns):
        user = n % users
        role, content = line(n // users, user, distinct=distinct)
        events.append(
            {
                "type": "turn",
                "tenant_id": tenant,
                "user_id": f"user-{user}",
                "role": role,
                "speaker": f"User{user}" if role == "user" else "Assistant",
                "content": content,
                "external_id": f"x-{n}",
                "channel": "web",
                "timestamp": (base + timedelta(seconds=n)).isoformat(),
            }
        )
    return events


def rss_mb(process: subprocess.Popen[bytes]) -> float:
    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
        return sum(p.memory_info().rss for p in tree) / 2**20
    except psutil.Error:
        return 0.0


def progress(engine, tenant: str) -> tuple[int, int, int, int]:  # type: ignore[no-untyped-def]
    """(turns, unclaimed turns, batches not stored, memories) of the tenant.

    Polled twice a second while the workers run, so it reads what indexes answer cheaply
    (unclaimed turns are a partial index) instead of counting claimed turns."""
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM episodic.turns WHERE tenant_id = :t),"
                " (SELECT count(*) FROM episodic.turns WHERE tenant_id = :t"
                "  AND extraction_batch_id IS NULL),"
                " (SELECT count(*) FROM semantic.extraction_batches WHERE tenant_id = :t"
                "  AND state NOT IN ('stored', 'failed')),"
                " (SELECT count(*) FROM semantic.memories WHERE tenant_id = :t)"
            ),
            {"t": tenant},
        ).one()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2, help="task threads per worker")
    parser.add_argument("--distinct", action="store_true", help="no sentence repeats (see line())")
    args = parser.parse_args()

    base = get_settings()
    services = fresh_database(base)
    client = get_redis(base)
    run = uuid.uuid4().hex[:8]
    settings = base
    keys = RedisKeys.from_settings(settings)
    env = {
        **os.environ,
        "ENGRAM_REDIS_PREFIX": settings.redis_prefix,
        "ENGRAM_DATABASE_NAME": settings.database_name,
        # Leftovers under the N-turn trigger are extracted by the idle trigger: make it fire
        # two seconds after the last turn instead of fifteen minutes.
        "ENGRAM_EXTRACT_IDLE_S": "2",
        # A batch that failed is retried by beat after ten minutes; here after thirty seconds,
        # so a retry shows in the time instead of stalling the run (sooner would re-send
        # batches that are merely queued behind the scoring tasks).
        "ENGRAM_EXTRACT_RETRY_AFTER_S": "30",
    }
    # The prefix separates Engram's own keys; Celery's queues are the broker's usual ones.
    logs = [
        (base.data_dir / f"bench-extract-worker-{n}.log").open("w") for n in range(args.workers)
    ]
    workers = [
        subprocess.Popen(
            worker_command(
                queues=("ingest", "extract", "embed"),
                concurrency=args.concurrency,
                consumers=1,
                loglevel="WARNING",
            ),
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )
        for log in logs
    ]
    engine = owner_engine(settings)
    tenant = f"benchx-{run}"
    peak = 0.0
    try:
        deadline = time.monotonic() + 60
        while sum(1 for _ in client.scan_iter(match=keys.consumer_heartbeats())) < args.workers:
            if time.monotonic() > deadline:
                raise SystemExit("workers did not start")
            time.sleep(0.1)
        events = make_turns(tenant, args.turns, args.users, distinct=args.distinct)
        producer = EventProducer(client, settings)
        started = time.perf_counter()
        for start in range(0, len(events), 1000):
            producer.send_many(events[start : start + 1000])
        last_sweep = time.monotonic()
        deadline = time.monotonic() + 1800
        while True:
            peak = max(peak, max(rss_mb(w) for w in workers))
            turns, unclaimed, open_batches, _ = progress(engine, tenant)
            if turns == args.turns and unclaimed == 0 and open_batches == 0:
                break
            if turns == args.turns and time.monotonic() - last_sweep > 3:
                # Only leftovers below the N-turn trigger remain, or failed batches: run
                # beat's sweep (score what is unscored, then the idle trigger) and its retry
                # of stale batches, as beat would, again if needed.
                from workers.celery_app import app

                app.send_task("engram.extract.sweep_idle")
                app.send_task("engram.extract.retry_stale")
                last_sweep = time.monotonic()
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {progress(engine, tenant)}")
            time.sleep(0.5)
        elapsed = time.perf_counter() - started
        _, _, _, memories = progress(engine, tenant)
        embedded = int(client.get(keys.embedded_count()) or 0)
        with engine.connect() as conn:
            failed, retried = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE state = 'failed'),"
                    " count(*) FILTER (WHERE attempts > 0)"
                    " FROM semantic.extraction_batches WHERE tenant_id = :t"
                ),
                {"t": tenant},
            ).one()
            entities = conn.execute(
                text("SELECT count(*) FROM conceptual.entities WHERE tenant_id = :t"),
                {"t": tenant},
            ).scalar_one()
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=120)
        keys_left = list(client.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))
        for start in range(0, len(keys_left), 1000):
            client.delete(*keys_left[start : start + 1000])
        services.stop()

    turns_per_s = args.turns / elapsed
    print(
        f"turns={args.turns} users={args.users} workers={args.workers} "
        f"concurrency={args.concurrency} elapsed={elapsed:.1f}s memories={memories} "
        f"entities={entities} failed_batches={failed} retried_batches={retried} "
        f"embedded={embedded} distinct={args.distinct}"
    )
    print(
        f"extract turns_per_s={turns_per_s:.0f} gems_per_s={memories / elapsed:.1f} "
        f"embed_per_s={embedded / elapsed:.0f} embeds_per_turn={embedded / args.turns:.2f} "
        f"rss_mb={peak:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
