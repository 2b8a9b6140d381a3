"""Two `celery beat` processes at once (a deploy overlap, a second host started by mistake),
both firing stream trims and maintenance many times a second beside a working ingest: the
doubled jobs trim only what was consumed, every event is stored exactly once, and the API
never answers 5xx."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import redis

from app.config import Settings
from app.keys import RedisKeys
from tests.faults.stack import beat, worker
from tests.faults.tally import (
    Tally,
    dead_letters,
    lost_entries,
    pending,
    stored_turns,
    tally,
)
from tests.faults.traffic import ApiClient
from tests.integration.helpers import turn, wait_for
from workers.queues import INGEST, MAINTENANCE, RECALL

USERS = 10
WAVES = 12
PER_WAVE = 200
# Beat intervals of a fraction of a second: each beat sends these jobs dozens of times.
FAST = {
    "ENGRAM_TRIM_INTERVAL_S": "0.3",
    "ENGRAM_DECAY_INTERVAL_S": "1",
    "ENGRAM_HEBBIAN_INTERVAL_S": "1",
    "ENGRAM_META_REFRESH_INTERVAL_S": "1",
}


def _stream_length(client: redis.Redis, settings: Settings) -> int:
    keys = RedisKeys.from_settings(settings).partitions(settings.stream_partitions)
    return sum(int(client.xlen(key)) for key in keys)


def test_two_beats_at_once_lose_and_duplicate_nothing(
    fault_settings: Settings,
    private_redis: redis.Redis,
    api_client: ApiClient,
    logs: Path,
    report: Callable[[Tally], None],
) -> None:
    settings = fault_settings
    tenant = api_client.tenant
    events = [turn(tenant, f"user-{n % USERS}", n) for n in range(WAVES * PER_WAVE)]
    queues = (INGEST, MAINTENANCE, RECALL)

    with (
        worker(settings, logs / "worker.log", queues, **FAST),
        beat(settings, logs / "beat-a.log", logs / "beat-a", **FAST) as first,
        beat(settings, logs / "beat-b.log", logs / "beat-b", **FAST) as second,
    ):
        for wave in range(WAVES):
            assert api_client.send(events[wave * PER_WAVE : (wave + 1) * PER_WAVE])
            api_client.search(f"user-{wave % USERS}")
            time.sleep(0.5)  # trims run between the waves, while entries are in flight
        wait_for(
            lambda: (
                stored_turns(settings, tenant) >= len(events)
                and pending(private_redis, settings) == 0
            ),
            timeout=120,
        )
        trimmed = wait_for(
            lambda: _stream_length(private_redis, settings) < len(events), timeout=30
        )
        beats_alive = first.poll() is None and second.poll() is None

    result = tally("two_beats", settings, tenant, api_client.sent)
    report(result)
    assert trimmed, "no trim ran; the test proves nothing"
    assert beats_alive, f"a beat exited; see {logs}"
    assert result.lost == 0 and result.duplicated == 0, result
    assert result.sent == result.stored == len(events)
    assert api_client.server_errors() == []
    assert dead_letters(private_redis, settings) == []
    assert lost_entries(private_redis, settings) == 0
