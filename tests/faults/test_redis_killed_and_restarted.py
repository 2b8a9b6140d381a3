"""Redis SIGKILLed under the API and a working ingest, then restarted on its AOF: the API answers
503 (never 500) while Redis is down, a client re-sends what was refused, the streams, the
consumer group and its pending entries come back from the AOF, and every event the API
accepted is stored exactly once."""

from __future__ import annotations

from collections.abc import Callable

from app.config import Settings
from tests.faults.stack import Stack, private_env
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

USERS = 10
BATCH = 50
BATCHES = 30


def test_redis_killed_and_restarted_with_aof_loses_and_duplicates_nothing(
    fault_settings: Settings,
    stack: Stack,
    api_client: ApiClient,
    report: Callable[[Tally], None],
) -> None:
    settings = fault_settings
    tenant = api_client.tenant
    batches = [
        [turn(tenant, f"user-{n % USERS}", n) for n in range(b * BATCH, (b + 1) * BATCH)]
        for b in range(BATCHES)
    ]

    with celery_worker(
        settings, **private_env(settings), ENGRAM_CONSUMER_BATCH_SIZE="50"
    ) as ingest:
        for batch in batches[:10]:
            assert api_client.send(batch)
        wait_until_stored(settings, tenant, ingest)
        stack.redis.kill()
        api_client.during_fault = True
        try:
            refused = [b for b in batches[10:20] if not api_client.send(b)]
            api_client.search("user-1")
        finally:
            stack.redis.start()
        # Until the first 202 the API's pooled connections may still be the dead ones.
        still_refused = api_client.send_until_taken(refused + batches[20:])
        client = stack.redis.client()
        wait_for(
            lambda: (
                stored_turns(settings, tenant) >= len(api_client.sent)
                and pending(client, settings) == 0
            ),
            timeout=120,
        )
        api_client.search("user-1")

    result = tally("redis_killed", settings, tenant, api_client.sent)
    report(result)
    assert refused, "no request met the outage; the test proves nothing"
    assert not still_refused, "the API never took events again after Redis came back"
    assert result.lost == 0 and result.duplicated == 0, result
    assert result.sent == result.stored == BATCHES * BATCH
    assert api_client.server_errors() == []
    assert dead_letters(client, settings) == []
    assert lost_entries(client, settings) == 0
