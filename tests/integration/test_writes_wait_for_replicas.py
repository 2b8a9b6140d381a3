"""ENGRAM_STREAM_WAIT_REPLICAS on a Redis that has no replica (the test Redis): every write is
refused, clearly, naming the setting; nothing is reported accepted.

Why refusing at the first write rather than at startup: the same condition arises at run
time whenever a replica dies or restarts, so it must be handled per write anyway; refusing to
start would take the reads (search, context) down with the writes during a replica's restart,
while a refused write is a 503 with Retry-After that the SDK retries, and the first resend
after the replica is back succeeds. The API starts and answers; its writes say what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.api.app import create_app
from app.cli.errors import explain
from app.config import Settings
from app.db.session import unit_of_work
from app.layers.episodic.models import Turn
from app.services.ingest import IngestService
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from app.streams.durable import ReplicationShortfall
from app.streams.failures import is_transient
from app.streams.producer import EventProducer, NotReplicatedError
from tests.integration.helpers import ingest_consumer, turn


@pytest.fixture
def safe(settings: Settings, redis_client: redis.Redis) -> Settings:
    """The safe mode on the test Redis, which has no replica: a short wait, it cannot help."""
    assert int(redis_client.info("replication")["connected_slaves"]) == 0
    return settings.model_copy(update={"stream_wait_replicas": 1, "stream_wait_timeout_ms": 50})


@pytest.fixture
def api(safe: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(safe)) as client:
        yield client


def test_the_door_starts_and_refuses_writes_with_503_naming_the_setting(
    api: TestClient, safe: Settings, tenant: str
) -> None:
    assert api.get("/healthz").status_code == 200
    key = mint_key(tenant, name="wait for replicas", settings=safe).key
    response = api.post(
        "/v1/events",
        json={"events": [turn(tenant, "u1", 1)]},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) > 0
    detail = response.json()["detail"]
    assert detail["accepted"] == []
    assert "0 connected replica(s) but ENGRAM_STREAM_WAIT_REPLICAS=1" in detail["message"]


def test_a_refused_write_resent_is_stored_once(
    safe: Settings, settings: Settings, redis_client: redis.Redis, tenant: str
) -> None:
    """The refused entry stays in the stream (Redis took it, no replica did): the resend adds
    a second one, and the consumer stores the turn once."""
    event = turn(tenant, "u1", 1)
    with pytest.raises(NotReplicatedError) as refused:
        EventProducer(redis_client, safe).send_many([event])
    assert refused.value.sent == [] and len(refused.value.unsent) == 1
    line = explain(refused.value, safe).line()  # what `engram` prints
    assert "ENGRAM_STREAM_WAIT_REPLICAS=0" in line and "cannot reach" not in line, line

    receipts = EventProducer(redis_client, settings).send_many([event])  # the safe mode off
    assert redis_client.xlen(receipts[0].stream) == 2
    consumer = ingest_consumer(redis_client, settings)
    while consumer.step(block_ms=50):
        pass
    assert consumer.stats.acked == 2
    with unit_of_work(tenant) as session:
        assert list(session.scalars(select(Turn.external_id))) == ["m-1"]


def test_a_dead_letter_is_not_acked_before_a_replica_has_it(
    safe: Settings, redis_client: redis.Redis
) -> None:
    """A dead-lettered entry is acked without being stored: under the safe mode its dead
    letter must survive a failover first, else the entry stays pending, to be retried."""
    consumer = StreamConsumer(
        client=redis_client,
        settings=safe,
        handler=IngestService(client=redis_client, settings=safe),
        name="c1",
    )
    consumer.ensure_groups()
    stream = consumer.streams[0]
    redis_client.xadd(stream, {"not-an-event": "x"})
    with pytest.raises(ReplicationShortfall) as caught:
        consumer.step(block_ms=50)
    assert is_transient(caught.value)  # the consumer backs off; it does not blame the entry
    assert redis_client.xpending(stream, safe.consumer_group)["pending"] == 1
