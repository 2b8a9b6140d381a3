"""A backlog drains without beat: each stored batch claims the user's next (at most two in
flight per user), leftovers below the N-turn trigger are flushed, and the extraction status
routes (and the SDK's wait_until_extracted) tell when a user's extraction has caught up.

The import test runs a real worker process (ingest, extract and embed queues, no beat, an
idle timeout that never fires) and the real API under uvicorn; the route tests ingest in
process. The bound and the drain, step by step: test_extraction_drain.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from engram_memory_client import AsyncEngramClient, EngramClient, ExtractionStatus
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.api.app import create_app
from app.config import Settings
from app.db.session import unit_of_work
from app.embedding.factory import get_embedder
from app.keys import partition_of
from app.layers.semantic import batches as semantic
from app.services import extraction
from app.services.attention import score_users
from app.services.ingest import IngestService
from app.services.tenants import mint_key
from app.streams.consumer import StreamConsumer
from app.streams.producer import EventProducer
from tests.integration.api_server import serve
from tests.integration.workers import celery_worker
from workers.queues import EMBED, EXTRACT, INGEST

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
IMPORTED = 2000
NEVER_IDLE_S = 10**7

LINES = (
    "We decided to move review number {n} to the Thursday slot.",
    "I prefer the window seat on flight {n} to Lisbon.",
    "Remind me to renew certificate {n} before it expires.",
    "ok thanks",
    "The staging cluster {n} runs on three small nodes.",
)


def say(tenant: str, user: str, n: int, content: str | None = None) -> dict[str, Any]:
    return {
        "type": "turn",
        "tenant_id": tenant,
        "user_id": user,
        "role": "user" if n % 2 == 0 else "assistant",
        "content": content or LINES[n % len(LINES)].format(n=n),
        "external_id": f"{user}-{n}",
        "channel": "web",
        "timestamp": (T0 + timedelta(minutes=n)).isoformat(),
    }


def other_partition_user(settings: Settings, tenant: str, taken: str) -> str:
    """A user id whose stream partition is not `taken`'s."""
    mine = partition_of(tenant, taken, settings.stream_partitions)
    for n in range(1000):
        user = f"leftover-{n}"
        if partition_of(tenant, user, settings.stream_partitions) != mine:
            return user
    raise AssertionError("every user id hashed to one partition")


def batches(tenant: str, user: str) -> list[Any]:
    with unit_of_work(tenant) as session:
        return list(
            session.execute(
                text(
                    "SELECT id, trigger, state, turn_count, attempts FROM"
                    " semantic.extraction_batches WHERE user_id = :user ORDER BY created_at"
                ),
                {"user": user},
            )
        )


def stored_turns(tenant: str, user: str) -> int:
    with unit_of_work(tenant) as session:
        return int(
            session.execute(
                text(
                    "SELECT count(*) FROM episodic.turns AS t"
                    " JOIN semantic.extraction_batches AS b ON b.id = t.extraction_batch_id"
                    " WHERE t.user_id = :user AND b.state = 'stored'"
                ),
                {"user": user},
            ).scalar_one()
        )


def fresh_in_flight(tenant: str, user: str) -> int:
    """What the bound counts: batches on their way, no failed attempt, recently moved."""
    with unit_of_work(tenant) as session:
        counts = semantic.fresh_in_flight_counts(
            session=session,
            tenant_id=tenant,
            user_ids=[user],
            updated_after=datetime.now(UTC) - timedelta(hours=1),
        )
    return counts.get(user, 0)


@contextmanager
def extraction_worker(settings: Settings, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery worker` serving ingest (its stream consumer), extract and embed."""
    with celery_worker(
        settings, queues=(INGEST, EXTRACT, EMBED), concurrency=2, stop_timeout=60, **env
    ) as process:
        yield process


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_large_import_drains_without_beat_and_the_sdk_sees_it_caught_up(
    settings: Settings, redis_client, tenant: str
) -> None:
    settings = settings.model_copy(update={"extract_idle_s": NEVER_IDLE_S})
    importer = "importer"
    talker = other_partition_user(settings, tenant, importer)
    producer = EventProducer(redis_client, settings)
    # The whole import is in the stream before a worker reads it.
    events = [say(tenant, importer, n) for n in range(IMPORTED)]
    for at in range(0, IMPORTED, 500):
        producer.send_many(events[at : at + 500])
    producer.send_many([say(tenant, talker, n) for n in range(3)])
    key = mint_key(tenant).key

    with serve(settings) as url, EngramClient(url, key) as engram:
        before = engram.extraction_status(importer)
        assert before.ingest_pending >= IMPORTED and not before.caught_up

        with extraction_worker(settings, ENGRAM_EXTRACT_IDLE_S=str(NEVER_IDLE_S)) as worker:
            most_in_flight = 0
            deadline = time.monotonic() + 900
            while stored_turns(tenant, importer) < IMPORTED:
                assert worker.poll() is None, "the worker died"
                assert time.monotonic() < deadline, f"drained {stored_turns(tenant, importer)}"
                most_in_flight = max(most_in_flight, fresh_in_flight(tenant, importer))
                time.sleep(0.25)

            # Every turn went through a batch of an automatic trigger: no beat, no idle, no flush.
            drained = batches(tenant, importer)
            assert {b.trigger for b in drained} <= {"turns", "context", "drain"}
            assert "drain" in {b.trigger for b in drained}
            assert {b.state for b in drained} == {"stored"}
            assert sum(b.turn_count for b in drained) == IMPORTED
            assert most_in_flight <= extraction.MAX_IN_FLIGHT

            done = engram.wait_until_extracted(importer, timeout=120)
            assert done.caught_up and done.turns == IMPORTED
            assert (done.unscored, done.unclaimed, done.in_flight_batches) == (0, 0, 0)
            assert done.failed_batches == 0 and done.ingest_pending == 0

            # Three turns, below the trigger: they would wait for the idle timeout.
            status = engram.extraction_status(talker)
            while not status.waiting_for_idle:
                assert time.monotonic() < deadline, status
                time.sleep(0.25)
                status = engram.extraction_status(talker)
            assert (status.turns, status.unclaimed, status.caught_up) == (3, 3, False)
            with pytest.raises(TimeoutError, match="3 unclaimed turn"):
                engram.wait_until_extracted(talker, timeout=1, interval=0.2, flush=False)

            flushed = engram.wait_until_extracted(talker, timeout=120)
            assert flushed.caught_up and flushed.turns == 3
            assert [(b.trigger, b.state, b.turn_count) for b in batches(tenant, talker)] == [
                ("flush", "stored", 3)
            ]
            assert asyncio.run(wait_async(url, key, talker)).caught_up

    with unit_of_work(tenant) as session:
        memories = dict(
            session.execute(
                text("SELECT user_id, count(*) FROM semantic.memories GROUP BY user_id")
            ).all()
        )
    assert memories.get(importer, 0) > 0 and memories.get(talker, 0) > 0


async def wait_async(url: str, key: str, user: str) -> ExtractionStatus:
    async with AsyncEngramClient(url, key) as engram:
        return await engram.wait_until_extracted(user, timeout=60)


# -- the routes, in process -----------------------------------------------------------------


class Ingest:
    """Ingest events in process; `score` also scores their users, as the worker's task does."""

    def __init__(self, settings: Settings, client: Any) -> None:
        self.settings = settings
        self.client = client
        self.consumer = StreamConsumer(
            client=client,
            settings=settings,
            handler=IngestService(client=client, settings=settings),
            name="test",
        )
        self.embedder = get_embedder(settings, client)

    def __call__(self, events: list[dict[str, Any]], *, score: bool = True) -> None:
        EventProducer(self.client, self.settings).send_many(events)
        self.consumer.ensure_groups()
        while self.consumer.step(block_ms=10):
            pass
        for tenant in {e["tenant_id"] for e in events} if score else ():
            score_users(
                settings=self.settings,
                client=self.client,
                embedder=self.embedder,
                tenant_id=tenant,
                user_ids=sorted({e["user_id"] for e in events if e["tenant_id"] == tenant}),
            )


@pytest.fixture
def ingest(settings: Settings, redis_client: Any) -> Ingest:
    return Ingest(settings, redis_client)


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def test_status_and_flush_routes(
    settings: Settings, redis_client, ingest, api: TestClient, tenant: str
) -> None:
    mine = {"Authorization": f"Bearer {mint_key(tenant).key}"}
    theirs = {"Authorization": f"Bearer {mint_key(f'{tenant}-b').key}"}
    status = "/v1/users/eli/extraction"

    def get(headers: dict[str, str]) -> dict[str, Any]:
        response = api.get(status, headers=headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    nothing = {
        "user_id": "eli",
        "turns": 0,
        "unscored": 0,
        "unclaimed": 0,
        "in_flight_batches": 0,
        "retrying_batches": 0,
        "failed_batches": 0,
        "ingest_pending": 0,
        "extract_after_turns": settings.extract_after_turns,
        "caught_up": True,
        "waiting_for_idle": False,
    }
    assert get(mine) == nothing

    events = [say(tenant, "eli", n) for n in range(3)]
    EventProducer(redis_client, settings).send_many(events)
    assert get(mine)["ingest_pending"] == 3  # no consumer group yet: the whole partition
    ingest(events, score=False)  # the same events again: stored once
    unscored = get(mine)
    assert unscored["ingest_pending"] == 0
    assert (unscored["turns"], unscored["unscored"], unscored["caught_up"]) == (3, 3, False)
    assert unscored["waiting_for_idle"] is False
    EventProducer(redis_client, settings).send_many([say(tenant, "eli", 3)])
    assert get(mine)["ingest_pending"] == 1  # the group's lag
    ingest([say(tenant, "eli", 3)])

    scored = get(mine)
    assert (scored["unscored"], scored["unclaimed"], scored["in_flight_batches"]) == (0, 4, 0)
    assert scored["waiting_for_idle"] is True and scored["caught_up"] is False
    # Another tenant's user of the same id is another user: nothing there, nothing to flush.
    assert get(theirs) == nothing
    other = api.post(f"{status}/flush", headers=theirs)
    assert other.status_code == 202 and other.json() == {"user_id": "eli", "batches": 0, "turns": 0}
    assert get(mine) == scored

    flushed = api.post(f"{status}/flush", headers=mine)
    assert flushed.status_code == 202, flushed.text
    assert flushed.json() == {"user_id": "eli", "batches": 1, "turns": 4}
    # The test client runs the background extraction before it returns.
    assert get(mine) == {**nothing, "turns": 4}
    assert [(b.trigger, b.state) for b in batches(tenant, "eli")] == [("flush", "stored")]
    again = api.post(f"{status}/flush", headers=mine)
    assert again.json() == {"user_id": "eli", "batches": 0, "turns": 0}


@pytest.mark.parametrize("user", ["bad%20id!", "-leading-dash", "a" * 129, "semi;colon"])
def test_a_bad_user_id_is_a_422(api: TestClient, tenant: str, user: str) -> None:
    headers = {"Authorization": f"Bearer {mint_key(tenant).key}"}
    for response in (
        api.get(f"/v1/users/{user}/extraction", headers=headers),
        api.post(f"/v1/users/{user}/extraction/flush", headers=headers),
    ):
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert detail["fields"] == ["user_id"]
        assert detail["message"].startswith("invalid request: user_id: String should match")


def test_unknown_paths_and_missing_keys(api: TestClient, tenant: str) -> None:
    headers = {"Authorization": f"Bearer {mint_key(tenant).key}"}
    for path in ("/v1/users/a/b/extraction", "/v1/users/eli/extraction/nope"):
        response = api.get(path, headers=headers)
        assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
    assert api.get("/v1/users/eli/extraction/flush", headers=headers).status_code == 405
    assert api.get("/v1/users/eli/extraction").status_code == 401
    assert api.post("/v1/users/eli/extraction/flush").status_code == 401
