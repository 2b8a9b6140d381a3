"""Two beats firing the same periodic job within its period run it once.

The jobs-level rule (`once_per_period`) is checked directly; then two real beat schedulers
fire every entry of the schedule at a real worker, and each entry runs exactly once.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from celery import Celery
from celery.beat import Scheduler
from sqlalchemy import text

from app.config import Settings
from app.db.session import unit_of_work
from app.redis_client import resolve_redis_url
from app.services import meta_refresh
from app.services.jobs import ALL_TENANTS, PERIOD_SHARE, once_per_period
from tests.integration.helpers import wait_for
from tests.integration.workers import celery_worker
from workers.beat import ENTRY_HEADER, PERIOD_HEADER, beat_schedule, job_name
from workers.queues import ALL_QUEUES, ROUTES, TASK_QUEUES


def _runs(job: str, since: datetime | None = None) -> list[str]:
    with unit_of_work(ALL_TENANTS) as session:
        return list(
            session.scalars(
                text(
                    "SELECT status FROM meta.job_runs WHERE job = :job"
                    " AND started_at >= coalesce(CAST(:since AS timestamptz), '-infinity')"
                    " ORDER BY started_at"
                ),
                {"job": job, "since": since},
            )
        )


def _db_now() -> datetime:
    with unit_of_work() as session:
        return session.execute(text("SELECT clock_timestamp()")).scalar_one()


def test_a_job_runs_once_per_period_whoever_fires_it() -> None:
    job = f"test-{uuid.uuid4().hex[:8]}"
    with once_per_period(job, 3600) as first:
        assert first is not None
    with once_per_period(job, 3600) as second:
        assert second is None  # the other beat, minutes later: skipped, and not recorded

    # The next period: one period on from the first run, give or take delivery jitter.
    later = datetime.now(UTC) + timedelta(seconds=3600 * PERIOD_SHARE + 1)
    with once_per_period(job, 3600, now=later) as next_period:
        assert next_period is not None
    assert _runs(job) == ["done", "done"]


def test_a_failed_run_does_not_use_up_the_period() -> None:
    job = f"test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError), once_per_period(job, 3600) as run:
        assert run is not None
        raise RuntimeError("the job failed")
    with once_per_period(job, 3600) as retry:
        assert retry is not None
    assert _runs(job) == ["failed", "done"]


def test_two_firings_at_once_run_once() -> None:
    job = f"test-{uuid.uuid4().hex[:8]}"
    inside, release = threading.Event(), threading.Event()
    ran: list[bool] = []

    def first() -> None:
        with once_per_period(job, 3600) as run:
            ran.append(run is not None)
            inside.set()
            assert release.wait(30)

    thread = threading.Thread(target=first, daemon=True)
    thread.start()
    try:
        assert inside.wait(30)
        with once_per_period(job, 3600) as second:
            assert second is None
    finally:
        release.set()
        thread.join(30)
    assert ran == [True]
    assert _runs(job) == ["done"]


def test_every_beat_entry_carries_its_name_and_period(settings: Settings) -> None:
    from workers.base import EngramTask
    from workers.celery_app import app

    app.loader.import_default_modules()
    for name, entry in beat_schedule(settings).items():
        headers = entry["options"]["headers"]
        assert headers[ENTRY_HEADER] == name
        assert headers[PERIOD_HEADER] == float(entry["schedule"])
        assert isinstance(app.tasks[entry["task"]], EngramTask), name


@pytest.fixture
def beat_worker(settings: Settings) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker on every queue (no stream consumers) with this test's keys."""
    with celery_worker(
        settings, queues=ALL_QUEUES, concurrency=2, consumers=0, stop_timeout=60
    ) as process:
        yield process


def _celery_prefix(settings: Settings) -> str:
    """Where the worker's Celery keys live (workers/celery_app.py)."""
    return f"{settings.redis_prefix}:celery:"


def _beat_app(settings: Settings) -> Celery:
    """What a beat process builds, pointed at this test's broker keys."""
    beat = Celery("engram-beat-under-test", set_as_current=False)
    beat.conf.update(
        broker_url=resolve_redis_url(settings),
        broker_transport_options={"global_keyprefix": _celery_prefix(settings)},
        task_serializer="json",
        task_queues=TASK_QUEUES,
        task_routes=ROUTES,
        beat_schedule=beat_schedule(settings),
        timezone="UTC",
    )
    return beat


def _drained(client: redis.Redis, settings: Settings) -> bool:
    prefix = _celery_prefix(settings)
    waiting = sum(int(client.llen(prefix + queue)) for queue in ALL_QUEUES)
    return waiting == 0 and int(client.hlen(prefix + "unacked")) == 0


@pytest.mark.slow
def test_two_beats_firing_every_entry_run_each_once(
    settings: Settings, redis_client: Any, beat_worker: subprocess.Popen[bytes]
) -> None:
    """One beat fires every entry and the worker runs them; a second beat fires them all
    again within their periods (at once, then after the first round finished): nothing
    runs a second time."""
    since = _db_now()
    app = _beat_app(settings)
    first, second = (Scheduler(app=app, lazy=False) for _ in range(2))
    entries = sorted(beat_schedule(settings))

    def fire(beat: Scheduler) -> None:
        for name in entries:
            beat.apply_entry(beat.schedule[name])

    def finished() -> bool:
        runs = [_runs(job_name(name), since) for name in entries]
        return all(runs) and not any("running" in r for r in runs)

    def settled(done: Callable[[], bool]) -> Callable[[], bool]:
        """A message is briefly in neither list while a worker takes it: look twice."""

        def twice() -> bool:
            if not (done() and _drained(redis_client, settings)):
                return False
            time.sleep(1)
            return done() and _drained(redis_client, settings)

        return twice

    fired = time.monotonic()
    fire(first)
    fire(second)
    assert wait_for(settled(finished), timeout=240, every=0.5)
    # Fired again: inside its period an entry is skipped; an entry whose period has passed
    # meanwhile (apply-access runs every 10 s; a loaded machine takes longer than that for
    # the round) may rightly run once more, and only once.
    fire(second)
    assert wait_for(settled(lambda: True), timeout=120, every=0.5)
    elapsed = time.monotonic() - fired  # bounds the time between any two runs of an entry

    assert beat_worker.poll() is None
    schedule = beat_schedule(settings)
    runs = {name: _runs(job_name(name), since) for name in entries}
    for name in entries:
        period = float(schedule[name]["schedule"])
        allowed = [["done"]] if elapsed < PERIOD_SHARE * period else [["done"], ["done"] * 2]
        assert runs[name] in allowed, (name, runs[name], elapsed)
    # The view refresh behind the scheduled entry (the job that used to run twice) ran once.
    assert _runs(meta_refresh.REFRESH_JOB, since).count("done") == 1
