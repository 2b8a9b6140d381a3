"""Postgres SIGKILLed under a working ingest and the API: the API answers 503 (never 500) for
what needs the database, the worker waits the outage out without blaming any entry, a client
re-sends what was refused, and once Postgres has recovered every accepted event is stored
exactly once."""

from __future__ import annotations

from collections.abc import Callable

import redis

from app.config import Settings
from tests.faults.stack import Stack, private_env
from tests.faults.tally import (
    Tally,
    dead_letters,
    lost_entries,
    pending,
    stored_turns,
    tally,
    transient_errors,
    wait_until_stored,
)
from tests.faults.traffic import ApiClient
from tests.integration.helpers import turn, wait_for
from tests.integration.workers import celery_worker

USERS = 20
BATCH = 500
BEFORE = 4
DURING = 2


def test_postgres_killed_and_restarted_loses_and_duplicates_nothing(
    fault_settings: Settings,
    private_redis: redis.Redis,
    stack: Stack,
    api_client: ApiClient,
    report: Callable[[Tally], None],
) -> None:
    settings = fault_settings
    tenant = api_client.tenant
    batches = [
        [turn(tenant, f"user-{n % USERS}", n) for n in range(b * BATCH, (b + 1) * BATCH)]
        for b in range(BEFORE + DURING)
    ]
    for batch in batches[:BEFORE]:
        assert api_client.send(batch)

    with celery_worker(
        settings, **private_env(settings), ENGRAM_CONSUMER_BATCH_SIZE="100"
    ) as ingest:
        wait_until_stored(settings, tenant, ingest)
        stack.postgres.kill()
        api_client.during_fault = True
        try:
            # Events need only Redis (and the key, cached for a few seconds); reads need both.
            refused = [b for b in batches[BEFORE:] if not api_client.send(b)]
            api_client.search("user-1")
            waited = wait_for(lambda: transient_errors(private_redis, settings) > 0, timeout=20)
        finally:
            stack.postgres.start()
        still_refused = api_client.send_until_taken(refused)
        api_client.during_fault = False
        wait_for(
            lambda: (
                stored_turns(settings, tenant) >= len(api_client.sent)
                and pending(private_redis, settings) == 0
            ),
            timeout=120,
        )
        api_client.search("user-1")

    result = tally("postgres_killed", settings, tenant, api_client.sent)
    report(result)
    assert waited, "no consumer met the outage; the test proves nothing"
    assert not still_refused, "the API never took events again after Postgres came back"
    assert result.lost == 0 and result.duplicated == 0, result
    assert result.sent == result.stored == (BEFORE + DURING) * BATCH
    assert api_client.server_errors() == []
    assert dead_letters(private_redis, settings) == [], "an outage is nobody's poison"
    assert lost_entries(private_redis, settings) == 0
