"""Outages: producers get a clear error; consumers keep their batch, back off, and finish it
once the database answers again."""

from __future__ import annotations

import socket

import pytest
import redis
from sqlalchemy import create_engine, func, select

from app.config import Settings
from app.db.bootstrap import database_urls
from app.db.session import unit_of_work
from app.layers.episodic.models import Turn
from app.services.ingest import IngestService
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer, ProducerError
from tests.integration.helpers import turn


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_producer_names_the_problem_when_redis_is_down(settings: Settings, tenant: str) -> None:
    dead = redis.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=0.5)
    with pytest.raises(ProducerError, match="Redis"):
        EventProducer(dead, settings).send(turn(tenant, "u", 1))


def test_consumer_retries_its_batch_through_a_database_outage(
    settings: Settings, redis_client, tenant: str
) -> None:
    EventProducer(redis_client, settings).send_many([turn(tenant, "u", n) for n in range(25)])
    down = create_engine(
        f"postgresql+psycopg://nobody@127.0.0.1:{_closed_port()}/engram",
        connect_args={"connect_timeout": 1},
    )
    service = IngestService(client=redis_client, settings=settings, engine=down)
    consumer = StreamConsumer(client=redis_client, settings=settings, handler=service, name="c")
    consumer.ensure_groups()

    for _ in range(2):
        with pytest.raises(Exception) as outage:
            consumer.step(block_ms=20)
    assert "connect" in str(outage.value).lower()
    assert consumer.stats.entry_failures == 0  # an outage is nobody's poison

    service.engine = create_engine(database_urls(settings).app)  # the database is back
    assert consumer.step(block_ms=20) == 25
    with unit_of_work(tenant) as session:
        assert session.scalar(select(func.count()).select_from(Turn)) == 25
    stream_pending = sum(
        redis_client.xpending(k, settings.consumer_group)["pending"] for k in consumer.streams
    )
    assert stream_pending == 0
