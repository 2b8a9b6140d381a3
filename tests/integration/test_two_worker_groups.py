"""Workers on several hosts: two worker groups, each its own process tree with its own node
name and queue set, share one ingest; when one group is SIGKILLed mid-ingest the other takes
over what it held (after the claim idle time) and every turn is stored exactly once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
import redis
from sqlalchemy import func, select

from app.cli.supervisor import worker_command
from app.config import PROJECT_ROOT, Settings
from app.db.session import unit_of_work
from app.keys import RedisKeys
from app.layers.episodic.models import Session, Turn
from app.streams.producer import EventProducer
from tests.conftest import worker_env
from tests.integration.helpers import turn, wait_for
from workers.queues import DREAM, INGEST, MAINTENANCE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USERS = 40
FIRST = 50  # turns per user while both groups live
SECOND = 200  # turns per user of the ingest one group does not survive


@contextmanager
def worker_group(
    settings: Settings, name: str, queues: Sequence[str]
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker in a session of its own (its own process tree, as on another host), with its
    own Celery node name and queues; stopped with its whole tree."""
    process = subprocess.Popen(
        worker_command(
            queues=queues, concurrency=1, consumers=2, hostname=f"{name}@{socket.gethostname()}"
        ),
        cwd=PROJECT_ROOT,
        env={**os.environ, **worker_env(settings, ENGRAM_CONSUMER_BATCH_SIZE="100")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _partitions(settings: Settings) -> list[str]:
    return RedisKeys.from_settings(settings).partitions(settings.stream_partitions)


def _consumers(client: redis.Redis, settings: Settings, pid: int) -> set[str]:
    """Consumers of the group a worker process registered (named host:pid:index:nonce)."""
    names: set[str] = set()
    for key in _partitions(settings):
        with contextlib.suppress(redis.ResponseError):  # group not created yet
            names |= {
                c["name"].decode() for c in client.xinfo_consumers(key, settings.consumer_group)
            }
    return {name for name in names if name.split(":")[1] == str(pid)}


def _pending(client: redis.Redis, settings: Settings, pid: int | None = None) -> int:
    """Entries delivered and not acked: all of them, or only a worker process's."""
    total = 0
    for key in _partitions(settings):
        with contextlib.suppress(redis.ResponseError):
            summary = client.xpending(key, settings.consumer_group)
            for row in summary["consumers"]:
                name = row["name"].decode() if isinstance(row["name"], bytes) else row["name"]
                if pid is None or name.split(":")[1] == str(pid):
                    total += int(row["pending"])
    return total


def _beating(client: redis.Redis, settings: Settings, pid: int) -> list[str]:
    """Heartbeat keys of a worker process's consumers (each publishes its counters every
    5 s; the key expires 30 s after its consumer dies)."""
    pattern = RedisKeys.from_settings(settings).consumer_heartbeats()
    found = [k.decode() for k in client.scan_iter(match=pattern, count=1000)]
    return [key for key in found if key.rsplit(":consumers:", 1)[1].split(":")[1] == str(pid)]


def _counter(client: redis.Redis, settings: Settings, pid: int, field: str) -> int:
    """A counter summed over a worker process's consumers, as their heartbeats publish it."""
    return sum(int(client.hget(key, field) or 0) for key in _beating(client, settings, pid))


def _stored(tenant: str) -> int:
    with unit_of_work(tenant) as session:
        return int(session.scalar(select(func.count()).select_from(Turn)) or 0)


def _push(producer: EventProducer, tenant: str, numbers: range) -> None:
    """Turns numbered `numbers` (each its own external id), spread over the users."""
    events = [turn(tenant, f"user-{n % USERS}", n) for n in numbers]
    for at in range(0, len(events), 1000):
        producer.send_many(events[at : at + 1000])


def test_two_groups_share_an_ingest_and_the_survivor_takes_over_a_dead_ones_entries(
    settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    settings = settings.model_copy(update={"claim_min_idle_ms": 1000})
    producer = EventProducer(redis_client, settings)
    first, total = USERS * FIRST, USERS * (FIRST + SECOND)
    with (
        worker_group(settings, "group-a", (INGEST, MAINTENANCE)) as a,
        worker_group(settings, "group-b", (INGEST, DREAM)) as b,
    ):
        # Both groups' consumers run before the ingest starts, or one could take it all.
        assert wait_for(
            lambda: (
                len(_beating(redis_client, settings, a.pid)) == 2
                and len(_beating(redis_client, settings, b.pid)) == 2
            ),
            timeout=120,
        ), "both groups' consumers are running"

        _push(producer, tenant, range(first))
        assert wait_for(lambda: _stored(tenant) == first, timeout=180)

        def shares() -> tuple[int, int]:
            return (
                _counter(redis_client, settings, a.pid, "acked"),
                _counter(redis_client, settings, b.pid, "acked"),
            )

        # Both groups took a share of the one ingest (as their heartbeats publish it).
        assert wait_for(lambda: sum(shares()) == first, timeout=60), shares()
        assert min(shares()) > 0, f"one group consumed everything: {shares()}"

        _push(producer, tenant, range(first, total))
        assert wait_for(lambda: _pending(redis_client, settings, b.pid) > 0, timeout=120)
        os.killpg(b.pid, signal.SIGKILL)
        b.wait()
        held = _pending(redis_client, settings, b.pid)
        assert held > 0, "group b died holding nothing; the test proves nothing"
        assert _stored(tenant) < total, "the ingest was over before group b died"
        dead = _consumers(redis_client, settings, b.pid)
        assert dead

        # The live group claims what the dead one held, once idle for the claim time.
        assert wait_for(lambda: _pending(redis_client, settings, b.pid) == 0, timeout=120)
        assert wait_for(
            lambda: _counter(redis_client, settings, a.pid, "reclaimed") >= held, timeout=60
        )
        assert wait_for(lambda: _stored(tenant) == total, timeout=300)
        assert wait_for(lambda: _pending(redis_client, settings) == 0, timeout=60)
        # Its entries taken over, the dead group's consumers leave the consumer group.
        assert wait_for(lambda: not _consumers(redis_client, settings, b.pid), timeout=120)
        assert a.poll() is None

    with unit_of_work(tenant) as session:
        assert session.scalar(select(func.count(func.distinct(Turn.external_id)))) == total
        assert session.scalar(select(func.sum(Session.turn_count))) == total
    keys = RedisKeys.from_settings(settings)
    assert redis_client.xlen(keys.dead_letters()) == 0
    assert int(redis_client.get(keys.lost_entries()) or 0) == 0
