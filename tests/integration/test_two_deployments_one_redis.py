"""Two deployments (two databases) on one Redis, with one key prefix, stay apart.

Each database gets its own deployment id at its first migration; every key and stream lives
under it, so a turn pushed to one deployment is ingested by that deployment's worker only. An
entry stamped by the other deployment that lands in a worker's stream anyway is dead-lettered
with an error naming both, never stored.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, select

from app.config import Settings
from app.db.bootstrap import drop_database, resolve_urls
from app.db.migrate import upgrade
from app.db.session import app_engine, unit_of_work
from app.deployment import DeploymentError, announce
from app.keys import RedisKeys, partition_of
from app.layers.episodic.models import Turn
from app.streams.deployment import FIELD
from app.streams.producer import EventProducer
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Deployment:
    settings: Settings
    engine: Engine
    keys: RedisKeys


def _turns(deployment: Deployment, tenant: str) -> list[str]:
    with unit_of_work(tenant, engine=deployment.engine) as session:
        return sorted(session.scalars(select(Turn.content)))


@pytest.fixture(scope="module")
def shared_prefix(base_settings: Settings) -> Iterator[str]:
    from app.redis_client import get_redis

    prefix = f"test-two-{uuid.uuid4().hex[:8]}"
    yield prefix
    client = get_redis(base_settings)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="module")
def deployments(base_settings: Settings, shared_prefix: str) -> Iterator[list[Deployment]]:
    """Two migrated databases on the embedded server, configured with the same prefix."""
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create databases")
    made = []
    for name in ("a", "b"):
        settings = base_settings.model_copy(
            update={
                "database_name": f"{base_settings.database_name}_deploy_{name}",
                "redis_prefix": shared_prefix,
                "claim_min_idle_ms": 200,
                "consumer_block_ms": 50,
            }
        )
        drop_database(settings.database_name, base_settings)
        upgrade(resolve_urls(settings).owner)
        made.append(Deployment(settings, app_engine(settings), RedisKeys.from_settings(settings)))
    yield made
    for deployment in made:
        deployment.engine.dispose()
        drop_database(deployment.settings.database_name, base_settings)


def test_each_database_has_its_own_namespace(deployments: list[Deployment]) -> None:
    a, b = deployments
    assert a.keys.deployment and b.keys.deployment
    assert a.keys.deployment != b.keys.deployment
    assert a.settings.redis_prefix == b.settings.redis_prefix
    assert a.keys.partition(0) == f"{a.settings.redis_prefix}:{a.keys.deployment}:events:{{p0}}"
    assert set(a.keys.partitions(8)).isdisjoint(b.keys.partitions(8))
    assert a.keys.dead_letters() != b.keys.dead_letters()
    assert a.keys.working_turns("t", "u") != b.keys.working_turns("t", "u")


def test_a_turn_pushed_to_one_is_never_ingested_by_the_other(
    deployments: list[Deployment], redis_client: redis.Redis
) -> None:
    a, b = deployments
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    # Same tenant and user on both sides: the same partition index, the worst case.
    EventProducer(redis_client, a.settings).send(turn(tenant, "u", 1, content="only for A"))
    EventProducer(redis_client, b.settings).send(turn(tenant, "u", 2, content="only for B"))
    with celery_worker(a.settings), celery_worker(b.settings):
        assert wait_for(lambda: _turns(a, tenant) == ["only for A"], timeout=90)
        assert wait_for(lambda: _turns(b, tenant) == ["only for B"], timeout=90)
        for deployment in (a, b):
            streams = deployment.keys.partitions(deployment.settings.stream_partitions)
            group = deployment.settings.consumer_group
            assert wait_for(
                lambda s=streams, g=group: all(
                    redis_client.xpending(x, g)["pending"] == 0 for x in s
                ),
                timeout=30,
            )
    assert _turns(a, tenant) == ["only for A"]
    assert _turns(b, tenant) == ["only for B"]


def test_an_entry_stamped_by_the_other_deployment_is_dead_lettered(
    deployments: list[Deployment], redis_client: redis.Redis
) -> None:
    a, b = deployments
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    event = turn(tenant, "u", 3, content="stamped by B, written into A's stream")
    stream = a.keys.partition(partition_of(tenant, "u", a.settings.stream_partitions))
    redis_client.xadd(stream, {"event": json.dumps(event), FIELD: b.keys.deployment or ""})
    ours = turn(tenant, "u", 4, content="A's own")
    EventProducer(redis_client, a.settings).send(ours)

    def letters() -> list[dict[bytes, bytes]]:
        return [fields for _, fields in redis_client.xrange(a.keys.dead_letters())]

    with celery_worker(a.settings):
        assert wait_for(lambda: _turns(a, tenant) == ["A's own"], timeout=90)
        assert wait_for(lambda: len(letters()) == 1, timeout=30)
    [letter] = letters()
    error = letter[b"error"].decode()
    assert "DeploymentMismatch" in error
    assert str(b.keys.deployment) in error and str(a.keys.deployment) in error
    assert _turns(a, tenant) == ["A's own"]


def test_a_producer_without_a_database_finds_the_one_announced_deployment(
    deployments: list[Deployment], redis_client: redis.Redis, tmp_path: Path
) -> None:
    a, b = deployments
    prefix = f"test-pure-{uuid.uuid4().hex[:8]}"
    # No DATABASE_URL and no embedded cluster in its data folder: only Redis.
    pure = a.settings.model_copy(
        update={"database_url": None, "data_dir": tmp_path, "redis_prefix": prefix}
    )
    try:
        with pytest.raises(DeploymentError, match="no Engram deployment has announced"):
            EventProducer(redis_client, pure).keys  # noqa: B018 - resolving is the point
        announce(a.settings.model_copy(update={"redis_prefix": prefix}), redis_client)
        assert EventProducer(redis_client, pure).keys.deployment == a.keys.deployment
        announce(b.settings.model_copy(update={"redis_prefix": prefix}), redis_client)
        with pytest.raises(DeploymentError, match="2 deployments share the prefix"):
            EventProducer(redis_client, pure).keys  # noqa: B018
        chosen = pure.model_copy(update={"deployment_id": b.keys.deployment})
        assert EventProducer(redis_client, chosen).keys.deployment == b.keys.deployment
    finally:
        redis_client.delete(RedisKeys(prefix).deployments())


def test_a_configured_id_must_agree_with_the_database(deployments: list[Deployment]) -> None:
    a, b = deployments
    wrong = a.settings.model_copy(update={"deployment_id": b.keys.deployment})
    with pytest.raises(DeploymentError, match="belongs to deployment"):
        RedisKeys.from_settings(wrong)
