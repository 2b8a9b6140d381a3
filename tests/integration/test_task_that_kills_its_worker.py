"""A task that never finishes (its worker dies each time) is given up after N deliveries."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from app.config import Settings
from app.keys import RedisKeys


@pytest.fixture
def process_settings(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    from app.config import get_settings

    monkeypatch.setitem(os.environ, "ENGRAM_REDIS_PREFIX", settings.redis_prefix)
    monkeypatch.setitem(os.environ, "ENGRAM_TASK_MAX_DELIVERIES", "2")
    get_settings.cache_clear()
    yield get_settings()
    monkeypatch.delitem(os.environ, "ENGRAM_REDIS_PREFIX")
    monkeypatch.delitem(os.environ, "ENGRAM_TASK_MAX_DELIVERIES")
    get_settings.cache_clear()


class WorkerDied(BaseException):
    """Stands for the process dying mid-task: nothing after it runs."""


def test_deliveries_are_counted_and_the_task_is_dropped_past_the_limit(
    process_settings: Settings, redis_client
) -> None:
    from workers.base import engram_task

    runs: list[int] = []

    @engram_task(f"engram.maintenance.test_killer_{uuid.uuid4().hex[:6]}")
    def killer(n: int) -> int:
        runs.append(n)
        if len(runs) <= 2:
            raise WorkerDied
        return n

    task_id = str(uuid.uuid4())
    for _ in range(3):  # the broker redelivers the same message after each crash
        killer.push_request(id=task_id, is_eager=False)
        try:
            result = killer(7)
        except WorkerDied:
            result = "died"
        finally:
            killer.pop_request()
        assert result in ("died", None)

    assert runs == [7, 7]  # the third delivery was not run
    dead = redis_client.xrange(RedisKeys.from_settings(process_settings).dead_tasks())
    assert len(dead) == 1
    assert dead[0][1][b"task_id"].decode() == task_id
    assert int(dead[0][1][b"deliveries"]) == 3


def test_a_finished_task_clears_its_counter(process_settings: Settings, redis_client) -> None:
    from workers.base import engram_task

    @engram_task(f"engram.maintenance.test_ok_{uuid.uuid4().hex[:6]}")
    def fine() -> str:
        return "ok"

    task_id = str(uuid.uuid4())
    fine.push_request(id=task_id, is_eager=False)
    try:
        assert fine() == "ok"
    finally:
        fine.pop_request()
    key = RedisKeys.from_settings(process_settings).task_deliveries(task_id)
    assert redis_client.exists(key) == 0
