"""Celery's broker apart from the data Redis (CELERY_BROKER_URL): turns posted to the API are
stored and extracted by a real worker whose tasks travel through a second Redis, or through
RabbitMQ in a vhost of the test's own, while streams and working memory stay on the data Redis.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import text

from app.config import PROJECT_ROOT, Settings
from app.db.session import unit_of_work
from app.services.tenants import mint_key
from tests.conftest import worker_env
from tests.integration.api_server import serve
from tests.integration.helpers import wait_for
from tests.integration.test_backlog_drains_without_beat import say
from tests.integration.workers import celery_worker
from tests.private_redis import PrivateRedis
from workers.queues import EMBED, EXTRACT, INGEST

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TURNS = 10
RABBITMQ = ("127.0.0.1", 5672)


@contextmanager
def worker_on(settings: Settings, broker: str, node: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker serving ingest, extract and embed, its Celery broker at `broker`."""
    with celery_worker(
        settings,
        queues=(INGEST, EXTRACT, EMBED),
        concurrency=2,
        hostname=node,
        stop_timeout=60,
        CELERY_BROKER_URL=broker,
    ) as process:
        yield process


def memories_of(tenant: str, user: str) -> int:
    with unit_of_work(tenant) as session:
        return int(
            session.execute(
                text("SELECT count(*) FROM semantic.memories WHERE user_id = :user"),
                {"user": user},
            ).scalar_one()
        )


def turns_of(tenant: str, user: str) -> int:
    with unit_of_work(tenant) as session:
        return int(
            session.execute(
                text("SELECT count(*) FROM episodic.turns WHERE user_id = :user"), {"user": user}
            ).scalar_one()
        )


def post_and_extract(settings: Settings, tenant: str, broker: str) -> None:
    """Post turns through the API; a worker on `broker` stores and extracts them, and its
    node answers the healthcheck's ping through that broker."""
    key = mint_key(tenant).key
    node = f"apart-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    events = [say(tenant, "ada", n) for n in range(TURNS)]
    with serve(settings) as url, worker_on(settings, broker, node) as worker:
        response = httpx.post(
            f"{url}/v1/events",
            json={"events": events},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert response.status_code == 202, response.text
        assert wait_for(lambda: turns_of(tenant, "ada") == TURNS, timeout=120), "not stored"
        # Scoring, extraction and embedding are Celery tasks: they went through the broker.
        assert wait_for(lambda: memories_of(tenant, "ada") > 0, timeout=240), "not extracted"
        assert worker.poll() is None
        # The container healthcheck pings the node through the same broker.
        ping = subprocess.run(
            [sys.executable, "-m", "workers.healthcheck", "worker", node],
            cwd=PROJECT_ROOT,
            env={**os.environ, **worker_env(settings, CELERY_BROKER_URL=broker)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ping.returncode == 0, ping.stderr


def celery_keys(client: redis.Redis, settings: Settings) -> list[bytes]:
    return list(client.scan_iter(match=f"{settings.redis_prefix}:celery:*", count=1000))


def test_a_second_redis_as_the_broker(
    settings: Settings, redis_client: redis.Redis, tenant: str, tmp_path: Path
) -> None:
    broker = PrivateRedis(tmp_path)
    broker.start()
    try:
        post_and_extract(settings, tenant, broker.url)
        apart = redis.Redis.from_url(broker.url)
        # Celery's bindings and queues sit in the broker, under the prefix as before ...
        bindings = {k.decode() for k in celery_keys(apart, settings)}
        assert f"{settings.redis_prefix}:celery:_kombu.binding.{EXTRACT}" in bindings
        apart.close()
    finally:
        broker.stop()
    # ... and none in the data Redis, which still holds the streams.
    assert celery_keys(redis_client, settings) == []
    assert list(redis_client.scan_iter(match=f"{settings.redis_prefix}:*", count=1000))


def _answers(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=2):
            return True
    except OSError:
        return False


def _rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    ctl = shutil.which("rabbitmqctl")
    assert ctl is not None
    return subprocess.run([ctl, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def rabbitmq_vhost() -> Iterator[str]:
    """A vhost of this test's own on the local RabbitMQ (guest may use it), deleted after."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed: no RabbitMQ to test the AMQP broker on")
    if not _answers(RABBITMQ):
        pytest.skip("RabbitMQ does not answer on 127.0.0.1:5672")
    vhost = f"engram_test_{uuid.uuid4().hex[:10]}"
    made = _rabbitmqctl("add_vhost", vhost)
    if made.returncode != 0:
        pytest.skip(f"rabbitmqctl add_vhost failed: {(made.stderr or made.stdout).strip()[:300]}")
    try:
        allowed = _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        assert allowed.returncode == 0, allowed.stderr
        yield vhost
    finally:
        gone = _rabbitmqctl("delete_vhost", vhost)
        assert gone.returncode == 0, gone.stderr


def test_rabbitmq_as_the_broker(
    settings: Settings, redis_client: redis.Redis, tenant: str, rabbitmq_vhost: str
) -> None:
    host, port = RABBITMQ
    post_and_extract(settings, tenant, f"amqp://guest:guest@{host}:{port}/{rabbitmq_vhost}")
    listed = _rabbitmqctl("list_queues", "-p", rabbitmq_vhost, "-q", "--no-table-headers", "name")
    assert listed.returncode == 0, listed.stderr
    queues = set(listed.stdout.split())
    assert {INGEST, EXTRACT, EMBED} <= queues, queues
    assert celery_keys(redis_client, settings) == []
