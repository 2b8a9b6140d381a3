"""A real Celery worker SIGKILLed with a batch in flight: a second worker reclaims what it held,
every event the API accepted is stored exactly once, and the API never answers 5xx."""

from __future__ import annotations

import signal
from collections.abc import Callable

import redis

from app.config import Settings
from tests.faults.stack import private_env
from tests.faults.tally import (
    Tally,
    dead_letters,
    lost_entries,
    pending,
    stored_turns,
    tally,
    wait_until_stored,
)
from tests.faults.traffic import ApiClient
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

USERS = 40
PER_USER = 150


def test_worker_sigkill_mid_batch_loses_and_duplicates_nothing(
    fault_settings: Settings,
    private_redis: redis.Redis,
    api_client: ApiClient,
    report: Callable[[Tally], None],
) -> None:
    settings = fault_settings.model_copy(update={"claim_min_idle_ms": 1000})
    tenant = api_client.tenant
    total = USERS * PER_USER
    events = [turn(tenant, f"user-{n % USERS}", n) for n in range(total)]
    for start in range(0, total, 1000):
        assert api_client.send(events[start : start + 1000])
    env = private_env(settings)

    with celery_worker(settings, **env, ENGRAM_CONSUMER_BATCH_SIZE="200") as doomed:
        wait_until_stored(settings, tenant, doomed)
        held = pending(private_redis, settings)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    stored_at_kill = stored_turns(settings, tenant)
    api_client.search("user-1")  # the API serves on while no worker runs

    with celery_worker(settings, **env):
        wait_for(
            lambda: (
                stored_turns(settings, tenant) >= total and pending(private_redis, settings) == 0
            ),
            timeout=120,
        )
    api_client.search("user-1")

    result = tally("worker_sigkill_mid_batch", settings, tenant, api_client.sent)
    report(result)
    assert held > 0, "the worker was killed with nothing in flight; the test proves nothing"
    assert stored_at_kill < total, "the worker finished before it was killed"
    assert result.lost == 0 and result.duplicated == 0, result
    assert result.sent == result.stored == total
    assert api_client.server_errors() == []
    assert pending(private_redis, settings) == 0
    assert dead_letters(private_redis, settings) == []
    assert lost_entries(private_redis, settings) == 0
