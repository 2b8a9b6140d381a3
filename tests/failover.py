"""A master killed mid-ingest, as tests/integration/test_cluster_failover.py and
bench/failover.py stage it on a local cluster (tests/cluster.py).

Producer threads push turns through EventProducer (the path under the REST door and the CLI)
while stream consumers in threads store them through the real IngestService into Postgres.
Once a share of the turns is accepted, the master holding the most of the partitions being
written is SIGKILLed; its replica takes over; the dead node is started again, as a supervisor
would, and rejoins as the new master's replica. A producer told "not accepted" (any
ProducerError) waits a little and resends the same batch, same external ids, as a real
client does. When the producers are done and the consumers have drained every partition,
what the producers were told was accepted is compared with the turns in Postgres.

* lost: accepted but never stored;
* delivered twice: turns the consumers committed more than once (an ack lost with the
  master, or a resent batch whose first copy the replica had after all);
* stored twice: turn rows beyond one per id (the primary key forbids it; counted anyway);
* dead letters: entries given up on (none is expected: a failover is an outage, not a fault).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from redis.cluster import RedisCluster
from sqlalchemy import func, select

from app.config import Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys, partition_of
from app.layers.episodic.models import Turn
from app.redis_client import get_redis
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer, StreamEntry
from app.streams.producer import EventProducer, NotReplicatedError, ProducerError, StreamFullError
from tests.cluster import (
    kill_node,
    replica_of,
    restart_node,
    wait_for_promotion,
    wait_for_replica,
)

Batch = list[dict[str, Any]]


@dataclass
class Plan:
    """The load: `producers` threads, each sending `batches` batches of `batch_size` turns
    of its own users; the kill comes once `kill_at` of all turns were accepted."""

    producers: int = 2
    batches: int = 40
    batch_size: int = 25
    users_per_producer: int = 8
    consumers: int = 2
    kill_at: float = 0.3
    pause_s: float = 0.0  # between one producer's batches
    timeout_s: float = 60.0  # the whole run, from the first batch to the drained streams


@dataclass
class Outcome:
    wait_replicas: int
    victim: int
    accepted: set[str]
    stored: set[str]
    stored_rows: int
    deliveries: Counter[str]
    refusals: int
    accepted_before_kill: int
    seconds_before_kill: float
    failover_s: float
    batches_on_victim: int
    dead_letters: int

    @property
    def lost(self) -> int:
        return len(self.accepted - self.stored)

    @property
    def delivered_twice(self) -> int:
        return sum(n - 1 for n in self.deliveries.values() if n > 1)

    @property
    def stored_twice(self) -> int:
        return self.stored_rows - len(self.stored)

    @property
    def producer_turns_per_s(self) -> float:
        """Accepted turns per second before the kill: the producers' cost of waiting."""
        return self.accepted_before_kill / max(self.seconds_before_kill, 1e-9)


class _Accepted:
    """Ids the producers were told were accepted, shared by their threads."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.refusals = 0
        self._lock = threading.Lock()

    def add(self, ids: Sequence[str]) -> None:
        with self._lock:
            self.ids.update(ids)

    def refused(self) -> None:
        with self._lock:
            self.refusals += 1

    def count(self) -> int:
        with self._lock:
            return len(self.ids)


class _CountingIngest:
    """The real ingest handler, counting each turn it committed (a redelivery counts again)."""

    def __init__(self, service: IngestService, counts: Counter[str], lock: threading.Lock):
        self.service, self.counts, self.lock = service, counts, lock

    def __call__(self, entries: Sequence[StreamEntry]) -> None:
        self.service.handle(entries)
        ids = [json.loads(e.fields["event"])["event_id"] for e in entries]
        with self.lock:
            self.counts.update(ids)


def turn_batches(tenant: str, plan: Plan) -> list[list[Batch]]:
    """Each producer's batches: its own users, external ids unique across producers."""
    base = datetime(2026, 3, 1, tzinfo=UTC)
    out = []
    for p in range(plan.producers):
        batches = []
        for b in range(plan.batches):
            batch = []
            for k in range(plan.batch_size):
                n = b * plan.batch_size + k
                batch.append(
                    {
                        "type": "turn",
                        "tenant_id": tenant,
                        "user_id": f"p{p}-u{n % plan.users_per_producer}",
                        "role": "user" if n % 2 == 0 else "assistant",
                        "content": f"Turn {n} of producer {p}: the failover drill, step {n}.",
                        "external_id": f"p{p}-{n}",
                        "timestamp": (base + timedelta(seconds=n)).isoformat(),
                    }
                )
            batches.append(batch)
        out.append(batches)
    return out


def _produce(
    producer: EventProducer, batches: list[Batch], accepted: _Accepted, plan: Plan, deadline: float
) -> None:
    for batch in batches:
        backoff = 0.05
        while True:
            try:
                receipts = producer.send_many(batch)
            except (StreamFullError, NotReplicatedError) as exc:
                accepted.add([r.event_id for r in exc.sent])
                accepted.refused()
            except ProducerError:
                accepted.refused()
            else:
                accepted.add([r.event_id for r in receipts])
                break
            if time.monotonic() > deadline:
                raise RuntimeError("a producer could not get its turns accepted in time")
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.5)
        if plan.pause_s:
            time.sleep(plan.pause_s)


def _undrained(client: Any, streams: list[str], group: str) -> list[str]:
    """Partitions whose entries are not all delivered to the group and acked, and why."""
    behind = []
    for stream in streams:
        last = _text(client.xinfo_stream(stream)["last-generated-id"])
        info = next((g for g in client.xinfo_groups(stream) if _text(g["name"]) == group), None)
        if info is None:
            behind.append(f"{stream}: no group")
        elif info["pending"] or _text(info["last-delivered-id"]) != last:
            delivered = _text(info["last-delivered-id"])
            behind.append(f"{stream}: {info['pending']} pending, delivered {delivered} of {last}")
    return behind


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _load_by_master(ports: list[int], streams: list[str]) -> Counter[int]:
    """Master port → batches written to the partitions it holds (every master listed)."""
    probe = RedisCluster(host="127.0.0.1", port=ports[0])
    try:
        load: Counter[int] = Counter({node.port: 0 for node in probe.get_primaries()})
        for stream in streams:
            load[probe.get_node_from_key(stream).port] += 1
    finally:
        probe.close()
    return load


def _stored(tenant: str) -> tuple[set[str], int]:
    with unit_of_work(tenant) as session:
        ids = {str(i) for i in session.scalars(select(Turn.id))}
        rows = int(session.scalar(select(func.count()).select_from(Turn)) or 0)
    return ids, rows


@dataclass
class _Consumers:
    threads: list[threading.Thread] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, client: Any, settings: Settings, count: int) -> None:
        for n in range(count):
            handler = _CountingIngest(
                IngestService(client=client, settings=settings), self.counts, self.lock
            )
            consumer = StreamConsumer(
                client=client, settings=settings, handler=handler, name=f"failover-{n}"
            )
            consumer.ensure_groups()
            thread = threading.Thread(target=consumer.run, args=(self.stop,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def committed(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def run_failover(
    base: Settings, ports: list[int], *, tenant: str, wait_replicas: int, plan: Plan
) -> Outcome:
    """Stage one kill on the running cluster on `ports` and report what became of the turns.
    `base` carries the Redis prefix, partitions and consumer timings; the cluster URL and
    stream_wait_replicas are set here."""
    batches = turn_batches(tenant, plan)
    keys = RedisKeys.from_settings(base)
    written = [
        keys.partition(partition_of(tenant, batch[0]["user_id"], base.stream_partitions))
        for mine in batches
        for batch in mine
    ]
    load = _load_by_master(ports, written)
    victim, on_victim = load.most_common(1)[0]
    for master in load:  # a fresh cluster answers before its replicas have synced
        wait_for_replica(master)
    entry = next(p for p in ports if p != victim)
    settings = base.model_copy(
        update={
            "redis_url": f"redis+cluster://127.0.0.1:{entry}",
            "stream_wait_replicas": wait_replicas,
        }
    )
    client = get_redis(settings)
    replica = replica_of(entry, victim)
    deadline = time.monotonic() + plan.timeout_s
    accepted = _Accepted()
    consumers = _Consumers()
    consumers.start(client, settings, plan.consumers)
    producer = EventProducer(client, settings)
    errors: list[BaseException] = []

    def produce(mine: list[Batch]) -> None:
        try:
            _produce(producer, mine, accepted, plan, deadline)
        except BaseException as exc:  # reported by the caller, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(mine,), daemon=True) for mine in batches]
    total = plan.producers * plan.batches * plan.batch_size
    try:
        started = time.monotonic()
        for thread in threads:
            thread.start()
        # Mid-ingest: a share of the turns accepted and the consumers already storing them.
        while accepted.count() < plan.kill_at * total or not consumers.committed():
            if time.monotonic() > deadline or errors:
                raise RuntimeError(f"ingest did not get going before the kill: {errors}")
            time.sleep(0.005)
        killed_at = time.monotonic()
        accepted_before_kill = accepted.count()
        kill_node(victim)
        wait_for_promotion(ports, victim, replica, timeout=max(1.0, deadline - time.monotonic()))
        failover_s = time.monotonic() - killed_at
        restart_node(victim)
        wait_for_replica(replica, timeout=max(1.0, deadline - time.monotonic()))
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if errors or any(t.is_alive() for t in threads):
            raise RuntimeError(f"the producers did not finish: {errors}")
        streams = keys.partitions(base.stream_partitions)
        calm = 0
        while calm < 2:
            behind = _undrained(client, streams, base.consumer_group)
            if behind and time.monotonic() > deadline:
                raise RuntimeError(f"the consumers did not drain the partitions: {behind}")
            calm = 0 if behind else calm + 1
            time.sleep(0.2)
        dead_letters = int(client.xlen(keys.dead_letters()))
    finally:
        consumers.join()
    stored, rows = _stored(tenant)
    return Outcome(
        wait_replicas=wait_replicas,
        victim=victim,
        accepted=set(accepted.ids),
        stored=stored,
        stored_rows=rows,
        deliveries=Counter(consumers.counts),
        refusals=accepted.refusals,
        accepted_before_kill=accepted_before_kill,
        seconds_before_kill=killed_at - started,
        failover_s=failover_s,
        batches_on_victim=on_victim,
        dead_letters=dead_letters,
    )
