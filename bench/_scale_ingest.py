"""bench/scale.py's phases 1-3 (capture, bare INSERT, ingest) and the pieces every phase
shares: the run's private Redis and Postgres probe, real workers, waiting for acks."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

from _measure import (
    Meter,
    PgProbe,
    Window,
    bench_module,
    redis_bytes,
    relation_bytes,
    use_database,
)
from sqlalchemy import text

from app.cli.supervisor import ProcessGroup, worker_command
from app.config import PROJECT_ROOT, Settings, get_settings
from app.db.session import app_engine, owner_engine, unit_of_work
from app.keys import RedisKeys
from app.layers.episodic import repository as episodic
from app.layers.episodic.sessions import SessionSpan
from app.layers.meta import repository as meta
from app.redis_client import get_redis
from app.services.ingest import _turn_row
from app.streams.events import TurnEvent, parse_event
from app.streams.producer import EventProducer
from app.text.tokens import count_many
from tests.private_redis import PrivateRedis

INGEST_DB = "engram_bench_scale"
TENANT = "bench-scale"
LAG_SAMPLES = 100_000  # the consumers keep this many XADD → ack lags (app/streams/consumer.py)
Groups = dict[str, Callable[[], set[int]]]


class Bench:
    """The run's shared pieces: arguments, the private Redis, the Postgres probe."""

    def __init__(self, args: argparse.Namespace, redis_server: PrivateRedis) -> None:
        self.args = args
        self.redis_server = redis_server
        self.run = uuid.uuid4().hex[:8]
        self.probe: PgProbe | None = None
        self.ingest_bench = bench_module("ingest")
        self.extract_bench = bench_module("extract")

    @property
    def pg(self) -> PgProbe:
        if self.probe is None:
            raise RuntimeError("the Postgres probe is opened by main() before any phase")
        return self.probe

    @property
    def redis_pid(self) -> int:
        if self.redis_server.process is None:
            raise RuntimeError("the private Redis is started by main() before any phase")
        return self.redis_server.process.pid

    def groups(self, settings: Settings, workers: list[subprocess.Popen[bytes]]) -> Groups:
        probe, redis_pid = self.pg, self.redis_pid
        return {
            "workers": lambda: {w.pid for w in workers},
            "postgres": lambda: probe.backends(settings.database_name, settings.app_role),
            "pg_server": probe.server_processes,
            "redis": lambda: {redis_pid},
            "bench": lambda: {os.getpid()},
        }

    def start_workers(
        self, queues: tuple[str, ...], concurrency: int, consumers: int, label: str, count: int
    ) -> list[subprocess.Popen[bytes]]:
        """Real `celery worker` processes; the broker is the private Redis as well."""
        env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
        workers = []
        for n in range(count):
            command = worker_command(
                queues=queues,
                concurrency=concurrency,
                consumers=consumers,
                loglevel="WARNING",
                hostname=f"scale{n}-{self.run}@%h",
            )
            with (get_settings().data_dir / f"bench-scale-{label}-{n}.log").open("w") as log:
                workers.append(
                    subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=log)
                )
        return workers

    @staticmethod
    def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
        ProcessGroup(list(workers)).stop(timeout=120)

    def wait_consumers(self, client: Any, keys: RedisKeys, count: int) -> None:
        deadline = time.monotonic() + 120
        while self.ingest_bench.consumers_alive(client, keys) < count:
            if time.monotonic() > deadline:
                raise SystemExit("workers did not start (see .engram/bench-scale-*.log)")
            time.sleep(0.1)


def wait_acked(client: Any, keys: RedisKeys, count: int, timeout: float = 900) -> None:
    """Until `count` entries were acked (each ack records its lag after commit and L1)."""
    deadline = time.monotonic() + timeout
    while client.llen(keys.ingest_lag()) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {client.llen(keys.ingest_lag())} of {count} entries acked")
        time.sleep(0.02)


def truncate_trace(settings: Settings) -> None:
    """Empty the episodic tables (and what references them) between phases."""
    with owner_engine(settings).begin() as conn:
        conn.execute(text("TRUNCATE episodic.turns, episodic.sessions, episodic.events CASCADE"))


def count_turns(settings: Settings, tenant: str) -> int:
    with owner_engine(settings).connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM episodic.turns WHERE tenant_id = :t"), {"t": tenant}
            ).scalar_one()
        )


# -- phases 1-3: capture, bare INSERT, ingest -----------------------------------------------


def capture(bench: Bench, events: list[dict[str, object]]) -> Window:
    """The producer alone; the stream's bytes per entry before any consumer trims it."""
    settings = use_database(INGEST_DB, f"bench-scale-{bench.run}-capture")
    client = get_redis(settings)
    redis_pid = bench.redis_pid
    meter = Meter(bench.pg, {"bench": lambda: {os.getpid()}, "redis": lambda: {redis_pid}}, None)
    producer = EventProducer(client, settings)
    meter.start()
    bench.ingest_bench.produce(producer, events)
    window = Window(len(events), meter.stop())
    keys = RedisKeys.for_producer(settings, client)
    stream = redis_bytes(client, keys.partitions(settings.stream_partitions))
    window.extra["stream_bytes_per_event"] = stream / len(events)
    bench.ingest_bench.clear(client, settings.redis_prefix)
    return window


def bare_insert(bench: Bench, events: list[dict[str, object]]) -> Window:
    """The same rows through the workers' INSERT statement, nothing else, one process."""
    settings = use_database(INGEST_DB, f"bench-scale-{bench.run}-bare")
    truncate_trace(settings)
    parsed = [parse_event(e) for e in events]
    turns = [e for e in parsed if isinstance(e, TurnEvent)]
    tokens = count_many([t.content for t in turns])
    spans: dict[str, SessionSpan] = {}
    for turn in turns:
        span = spans.setdefault(
            turn.user_id,
            SessionSpan(uuid.uuid4(), turn.user_id, turn.timestamp, turn.timestamp),
        )
        span.extend(turn.timestamp, turn.channel)
    engine = app_engine(settings)
    with unit_of_work(TENANT, engine=engine) as session:
        meta.register_tenants(session=session, tenant_ids={TENANT})
        episodic.upsert_sessions(session=session, tenant_id=TENANT, spans=list(spans.values()))
    rows = [
        _turn_row(turn, spans[turn.user_id].id, f"1-{n}", count)
        for n, (turn, count) in enumerate(zip(turns, tokens, strict=True))
    ]
    meter = Meter(bench.pg, bench.groups(settings, []))
    meter.start()
    for start in range(0, len(rows), bench.args.batch):
        with unit_of_work(TENANT, engine=engine) as session:
            episodic.insert_turns(session=session, rows=rows[start : start + bench.args.batch])
    window = Window(len(rows), meter.stop(bench.args.settle))
    if count_turns(settings, TENANT) != len(rows):
        raise SystemExit("bare INSERT stored fewer rows than it was given")
    return window


def ingest(bench: Bench, events: list[dict[str, object]], partitions: int) -> Window:
    """Real workers take the turns from the stream into L2 and L1."""
    args = bench.args
    settings = use_database(
        INGEST_DB,
        f"bench-scale-{bench.run}-p{partitions}",
        ENGRAM_STREAM_PARTITIONS=str(partitions),
        ENGRAM_CONSUMER_BATCH_SIZE=str(args.batch),
    )
    truncate_trace(settings)
    client = get_redis(settings)
    keys = RedisKeys.from_settings(settings)
    workers = bench.start_workers(
        ("ingest",), 1, args.consumers, f"ingest-p{partitions}", args.workers
    )
    try:
        bench.wait_consumers(client, keys, args.workers * args.consumers)
        producer = EventProducer(client, settings)
        warm = bench.ingest_bench.make_turns(f"{TENANT}-warm", 1000, 50)
        bench.ingest_bench.produce(producer, warm)
        wait_acked(client, keys, len(warm))
        client.delete(keys.ingest_lag())
        time.sleep(args.settle)
        meter = Meter(bench.pg, bench.groups(settings, workers))
        meter.start()
        bench.ingest_bench.produce(producer, events)
        wait_acked(client, keys, len(events))
        window = Window(len(events), meter.stop(args.settle))
        lags = [int(v) for v in client.lrange(keys.ingest_lag(), 0, -1)]
        if count_turns(settings, TENANT) != len(events):
            raise SystemExit(f"{count_turns(settings, TENANT)} of {len(events)} turns stored")
        users = sorted({str(e["user_id"]) for e in events})
        held = [
            key
            for user in users
            for key in (
                keys.working_turns(TENANT, user),
                keys.working_state(TENANT, user),
                keys.working_seen(TENANT, user),
                keys.working_evicted(TENANT, user),
            )
        ]
        window.extra["l1_bytes_per_user"] = redis_bytes(client, held) / len(users)
        window.extra["lag_p50_ms"] = bench.ingest_bench.percentile(lags, 0.5)
        window.extra["lag_p99_ms"] = bench.ingest_bench.percentile(lags, 0.99)
        with owner_engine(settings).connect() as conn:
            stored = conn.execute(text("SELECT count(*) FROM episodic.turns")).scalar_one()
            window.extra["turn_bytes"] = relation_bytes(conn, "episodic.turns") / int(stored)
    finally:
        bench.stop_workers(workers)
        bench.ingest_bench.clear(client, settings.redis_prefix)
    return window
